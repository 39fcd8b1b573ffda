"""Prometheus metrics of one server: requests, inferences vs executions, durations.

Each server owns its registry, so several servers (tests) never share counters.
``/metrics`` renders ``ServerMetrics.render()``::

    metrics = ServerMetrics()
    metrics.request("mlp", "1", ok=True, seconds=0.001)
    text = metrics.render().decode()
"""

from __future__ import annotations

import types

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest

from .batcher import BatchRecord

_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServerMetrics:
    """The metric families, labelled by model and version."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.registry = CollectorRegistry()
        labels = ["model", "version"]
        r = self.registry
        self.success = Counter("flowserve_request_success", "Inference requests that succeeded.",
                               labels, registry=r)
        self.failure = Counter("flowserve_request_failure", "Inference requests that failed.",
                               labels + ["reason"], registry=r)
        self.inferences = Counter("flowserve_inference_count",
                                  "Inferences performed (rows; a batch of 8 counts 8).",
                                  labels, registry=r)
        self.executions = Counter("flowserve_execution_count",
                                  "Model executions (batches run by ONNX Runtime).",
                                  labels, registry=r)
        self.request_duration = Histogram("flowserve_request_duration_seconds",
                                          "End-to-end time of a request in the server core.",
                                          labels, buckets=_LATENCY_BUCKETS, registry=r)
        self.queue_duration = Histogram("flowserve_queue_duration_seconds",
                                        "Time requests waited in the batching queue.",
                                        labels, buckets=_LATENCY_BUCKETS, registry=r)
        self.compute_duration = Histogram("flowserve_compute_duration_seconds",
                                          "Time ONNX Runtime took per executed batch.",
                                          labels, buckets=_LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("flowserve_batch_size", "Rows per executed batch.",
                                    labels, buckets=_BATCH_BUCKETS, registry=r)
        self._children: dict[tuple[str, str], types.SimpleNamespace] = {}

    def _of(self, model: str, version: str) -> types.SimpleNamespace:
        """The labelled series of one model version, looked up once (``labels`` locks)."""
        children = self._children.get((model, version))
        if children is None:
            children = types.SimpleNamespace(**{
                name: getattr(self, name).labels(model, version)
                for name in ("success", "inferences", "executions", "request_duration",
                             "queue_duration", "compute_duration", "batch_size")
            })
            self._children[(model, version)] = children
        return children

    def request(self, model: str, version: str, ok: bool, seconds: float,
                reason: str = "") -> None:
        """Count one finished inference request."""
        series = self._of(model, version)
        if ok:
            series.success.inc()
        else:
            self.failure.labels(model, version, reason).inc()
        series.request_duration.observe(seconds)

    def batch(self, model, record: BatchRecord) -> None:
        """Record an executed batch of ``model`` (a ``ServedModel``)."""
        series = self._of(model.name, model.version)
        for waited in record.queue_s:
            series.queue_duration.observe(waited)
        if record.failed:
            return
        series.inferences.inc(record.rows)
        series.executions.inc()
        series.compute_duration.observe(record.compute_s)
        series.batch_size.observe(record.rows)

    def render(self) -> bytes:
        """The registry in Prometheus' text exposition format."""
        return generate_latest(self.registry)
