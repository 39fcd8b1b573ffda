"""Prometheus metrics of one server: requests, inferences vs executions, durations.

Each server owns its registry, so several servers (tests) never share counters.
The worker processes of one ``--workers N`` server do share theirs: each writes a
snapshot of its series, and of its models' Triton statistics, to ``shared_dir``
every tenth of a second when they changed (``publish``); whichever worker answers a
scrape (or a statistics request, ``peer_statistics``) adds the others' latest
snapshots to its own live values.
The series are plain numbers updated on the event loop (a counter add or a
histogram bisect, well under a microsecond, where ``prometheus_client``'s
locked metrics cost a few each) and turned into metric families only when
``/metrics`` is scraped::

    metrics = ServerMetrics()
    metrics.request("mlp", "1", ok=True, seconds=0.001)
    text = metrics.render().decode()
"""

from __future__ import annotations

import bisect
import collections
import json
import logging
import os
import pathlib
from typing import Callable, Optional

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from .batcher import BatchRecord
from .model import ModelStatistics

log = logging.getLogger("flowserve.server")

SNAPSHOT_LIMIT_BYTES = 16 * 2**20  # a larger snapshot file is skipped, never read whole

_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_LABELS = ["model", "version"]


class Histogram:
    """Counts per bucket (upper bounds inclusive, like Prometheus), a sum and a count."""

    def __init__(self, bounds: tuple):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def add(self, counts: list, total: float) -> None:
        if not isinstance(counts, list) or len(counts) != len(self.counts):
            raise ValueError(f"expected {len(self.counts)} bucket counts, got {counts!r:.80}")
        self.counts = [a + b for a, b in zip(self.counts, counts)]
        self.sum += total

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` pairs as the exposition format wants them."""
        total, pairs = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            total += count
            pairs.append((floatToGoString(bound), total))
        return pairs


class ModelSeries:
    """Every series of one model version."""

    def __init__(self):
        self.success = 0
        self.failures: collections.Counter = collections.Counter()  # reason -> count
        self.inferences = 0
        self.executions = 0
        self.request_duration = Histogram(_LATENCY_BUCKETS)
        self.queue_duration = Histogram(_LATENCY_BUCKETS)
        self.compute_duration = Histogram(_LATENCY_BUCKETS)
        self.batch_size = Histogram(_BATCH_BUCKETS)

    def snapshot(self) -> dict:
        """The series as plain JSON values."""
        values = {name: getattr(self, name) for name in _PLAIN_FIELDS}
        values["failures"] = dict(self.failures)
        for name in _HISTOGRAM_FIELDS:
            histogram = getattr(self, name)
            values[name] = {"counts": histogram.counts, "sum": histogram.sum}
        return values

    def add(self, snapshot: dict) -> None:
        """Add another worker's ``snapshot()`` of the same model version."""
        for name in _PLAIN_FIELDS:
            setattr(self, name, getattr(self, name) + snapshot[name])
        self.failures.update(snapshot["failures"])
        for name in _HISTOGRAM_FIELDS:
            getattr(self, name).add(snapshot[name]["counts"], snapshot[name]["sum"])


_PLAIN_FIELDS = ("success", "inferences", "executions")
_HISTOGRAM_FIELDS = ("request_duration", "queue_duration", "compute_duration", "batch_size")


_COUNTERS = (
    ("flowserve_request_success", "Inference requests that succeeded.", "success"),
    ("flowserve_inference_count", "Inferences performed (rows; a batch of 8 counts 8).",
     "inferences"),
    ("flowserve_execution_count", "Model executions (batches run by ONNX Runtime).",
     "executions"),
)
_HISTOGRAMS = (
    ("flowserve_request_duration_seconds", "End-to-end time of a request in the server core.",
     "request_duration"),
    ("flowserve_queue_duration_seconds", "Time requests waited in the batching queue.",
     "queue_duration"),
    ("flowserve_compute_duration_seconds", "Time ONNX Runtime took per executed batch.",
     "compute_duration"),
    ("flowserve_batch_size", "Rows per executed batch.", "batch_size"),
)


class ServerMetrics:
    """The metric families, labelled by model and version."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, shared_dir: Optional[str] = None,
                 statistics: Callable[[], list] = list):
        """``statistics`` gives this worker's ``[model, version, ModelStatistics.snapshot()]``
        rows for ``publish``."""
        self.series: dict[tuple[str, str], ModelSeries] = {}
        self.shared_dir = pathlib.Path(shared_dir) if shared_dir else None
        self.statistics = statistics
        self.snapshot_limit_bytes = SNAPSHOT_LIMIT_BYTES
        self._changes = 0  # requests and batches recorded; publish skips when none is new
        self._published = -1
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def publish(self) -> None:
        """Write this worker's snapshot into ``shared_dir`` (atomically: readers see the
        previous snapshot or this one, never half of one), unless nothing was recorded
        since the last one."""
        if not self.unpublished():
            return
        self._published = self._changes  # what is recorded from here on goes in the next one
        rows = [[model, version, series.snapshot()]
                for (model, version), series in list(self.series.items())]
        document = {"series": rows, "statistics": self.statistics()}
        target = self.shared_dir / f"worker-{os.getpid()}.json"
        partial = target.with_suffix(".partial")
        partial.write_text(json.dumps(document))
        os.replace(partial, target)

    def unpublished(self) -> bool:
        """Whether ``publish`` has something new to write."""
        return self.shared_dir is not None and self._changes != self._published

    def _peer_snapshots(self) -> list[tuple[pathlib.Path, dict]]:
        """The other workers' latest published snapshots (none without ``shared_dir``)."""
        if self.shared_dir is None:
            return []
        own = self.shared_dir / f"worker-{os.getpid()}.json"
        documents = []
        for path in sorted(self.shared_dir.glob("worker-*.json")):
            if path != own:
                document = _read_snapshot(path, self.snapshot_limit_bytes)
                if document is not None:
                    documents.append((path, document))
        return documents

    def _all_series(self) -> list:
        """This worker's live series plus the other workers' latest snapshots."""
        if self.shared_dir is None:
            return list(self.series.items())
        merged: dict[tuple[str, str], ModelSeries] = {}
        for key, series in list(self.series.items()):
            merged.setdefault(key, ModelSeries()).add(series.snapshot())
        for path, document in self._peer_snapshots():
            try:
                peer: dict[tuple[str, str], ModelSeries] = {}
                for model, version, values in _rows(document, "series", path):
                    peer.setdefault((model, version), ModelSeries()).add(values)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("skipped a malformed metrics snapshot", extra={
                    "path": str(path), "error": f"series: {exc!r:.200}"})
                continue
            for key, series in peer.items():
                merged.setdefault(key, ModelSeries()).add(series.snapshot())
        return list(merged.items())

    def peer_statistics(self) -> dict[tuple[str, str], ModelStatistics]:
        """The other workers' latest Triton statistics, added up per model version (empty
        without ``shared_dir``); a malformed snapshot is skipped with a warning."""
        merged: dict[tuple[str, str], ModelStatistics] = {}
        for path, document in self._peer_snapshots():
            try:
                peer = [(model, version, ModelStatistics.from_snapshot(
                            values, f"statistics of {model!r} version {version!r}"))
                        for model, version, values in _rows(document, "statistics", path)]
            except ValueError as exc:
                log.warning("skipped a malformed metrics snapshot",
                            extra={"path": str(path), "error": f"{exc!s:.300}"})
                continue
            for model, version, stats in peer:
                merged.setdefault((model, version), ModelStatistics()).merge(stats)
        return merged

    def _of(self, model: str, version: str) -> ModelSeries:
        series = self.series.get((model, version))
        if series is None:
            series = self.series[(model, version)] = ModelSeries()
        return series

    def request(self, model: str, version: str, ok: bool, seconds: float,
                reason: str = "") -> None:
        """Count one finished inference request."""
        self._changes += 1
        series = self._of(model, version)
        if ok:
            series.success += 1
        else:
            series.failures[reason] += 1
        series.request_duration.observe(seconds)

    def batch(self, model, record: BatchRecord) -> None:
        """Record an executed batch of ``model`` (a ``ServedModel``)."""
        self._changes += 1
        series = self._of(model.name, model.version)
        for waited in record.queue_s:
            series.queue_duration.observe(waited)
        if record.failed:
            return
        series.inferences += record.rows
        series.executions += 1
        series.compute_duration.observe(record.compute_s)
        series.batch_size.observe(record.rows)

    def collect(self):
        """The metric families (``prometheus_client`` calls this when rendering)."""
        rows = self._all_series()
        for name, help_text, field in _COUNTERS:
            family = CounterMetricFamily(name, help_text, labels=_LABELS)
            for labels, series in rows:
                family.add_metric(list(labels), getattr(series, field))
            yield family
        failure = CounterMetricFamily("flowserve_request_failure",
                                      "Inference requests that failed.",
                                      labels=_LABELS + ["reason"])
        for labels, series in rows:
            for reason, count in list(series.failures.items()):
                failure.add_metric([*labels, reason], count)
        yield failure
        for name, help_text, field in _HISTOGRAMS:
            family = HistogramMetricFamily(name, help_text, labels=_LABELS)
            for labels, series in rows:
                histogram = getattr(series, field)
                family.add_metric(list(labels), histogram.buckets(), histogram.sum)
            yield family

    def render(self) -> bytes:
        """The registry in Prometheus' text exposition format."""
        return generate_latest(self.registry)


def _read_snapshot(path: pathlib.Path, limit: int) -> Optional[dict]:
    """A worker's published snapshot: ``None`` when it is gone (its file removed meanwhile,
    silently), larger than ``limit`` bytes or not a JSON object (with a warning)."""
    try:
        with open(path, "rb") as file:
            data = file.read(limit + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("skipped an unreadable metrics snapshot",
                    extra={"path": str(path), "error": f"{exc!s:.200}"})
        return None
    if len(data) > limit:
        log.warning("skipped a metrics snapshot over the size limit",
                    extra={"path": str(path), "limit_bytes": limit})
        return None
    try:
        document = json.loads(data)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError both are
        log.warning("skipped a metrics snapshot that is not JSON",
                    extra={"path": str(path), "error": f"{exc!s:.200}"})
        return None
    if not isinstance(document, dict):
        log.warning("skipped a metrics snapshot that is not a JSON object",
                    extra={"path": str(path), "got": type(document).__name__})
        return None
    return document


def _rows(document: dict, key: str, path: pathlib.Path) -> list:
    """``document[key]`` checked to be ``[model, version, values]`` rows (``ValueError``)."""
    rows = document.get(key)
    if not isinstance(rows, list):
        raise ValueError(f"{path}: {key}: expected a list of [model, version, values] rows, "
                         f"got {type(rows).__name__}")
    for index, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)
                and isinstance(row[1], str) and isinstance(row[2], dict)):
            raise ValueError(f"{path}: {key}[{index}]: expected [model, version, values], "
                             f"got {row!r:.80}")
    return rows
