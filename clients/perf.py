"""A closed-loop load generator: N concurrent workers, each one request at a time.

Bounded in time (``duration_s``) and optionally in count (``max_requests``);
reports throughput, latency percentiles and errors, and can plot latencies::

    report = asyncio.run(run_load("http://127.0.0.1:8000", "mlp", concurrency=8,
                                  duration_s=5))
    print(report.summary())
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Optional

import numpy as np

from flowserve.protocol.datatypes import NUMPY_BY_DATATYPE

from .errors import ClientError
from .grpc_client import AsyncGRPCClient
from .http import AsyncHTTPClient
from .tls import TLS


@dataclasses.dataclass
class LoadReport:
    """Latencies (seconds, in completion order) and counts of one load run."""

    protocol: str
    concurrency: int
    elapsed_s: float
    latencies_s: list
    errors: int
    first_error: str = ""

    @property
    def requests(self) -> int:
        return len(self.latencies_s)

    @property
    def throughput(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s else 0.0

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q) * 1e3) if self.latencies_s else float("nan")

    def summary(self) -> str:
        """A few human-readable lines."""
        lines = [
            f"protocol {self.protocol}, concurrency {self.concurrency}, "
            f"{self.requests} requests in {self.elapsed_s:.2f} s, {self.errors} errors",
            f"throughput {self.throughput:,.0f} req/s",
            "latency p50 {:.3f} ms  p90 {:.3f} ms  p99 {:.3f} ms".format(
                self.percentile_ms(50), self.percentile_ms(90), self.percentile_ms(99)),
        ]
        if self.first_error:
            lines.append(f"first error: {self.first_error}")
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """Write a PNG: latency over time and its histogram (needs matplotlib)."""
        import matplotlib  # local: optional, needed only for --plot

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # local: after choosing the Agg backend

        latencies_ms = np.asarray(self.latencies_s) * 1e3
        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        left.plot(latencies_ms, ".", markersize=1)
        left.set(xlabel="request", ylabel="latency (ms)", title="latency per request")
        right.hist(latencies_ms, bins=100)
        for q in (50, 90, 99):
            right.axvline(self.percentile_ms(q), linestyle="--", label=f"p{q}")
        right.set(xlabel="latency (ms)", ylabel="requests", title=f"{self.throughput:,.0f} req/s")
        right.legend()
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)


def sample_inputs(metadata: dict, batch_size: int = 1, seed: int = 0) -> dict:
    """Random inputs matching model ``metadata`` (-1 dims become ``batch_size``/1)."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for position, tensor in enumerate(metadata["inputs"]):
        shape = [batch_size if (d == -1 and i == 0) else max(d, 1)
                 for i, d in enumerate(tensor["shape"])]
        dtype = NUMPY_BY_DATATYPE[tensor["datatype"]]
        if tensor["datatype"] == "BYTES":
            array = np.full(shape, b"x", dtype=object)
        elif dtype.kind == "f" or tensor["datatype"] == "BF16":
            array = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            array = rng.integers(0, 2, shape).astype(dtype)
        else:
            array = rng.integers(0, 10, shape).astype(dtype)
        inputs[tensor["name"]] = array
    return inputs


async def run_load(url: str, model: str, concurrency: int = 1, duration_s: float = 10.0,
                   protocol: str = "http", binary: bool = True,
                   inputs: Optional[dict] = None, max_requests: Optional[int] = None,
                   token: Optional[str] = None, warmup_s: float = 0.5,
                   version: str = "", tls: Optional[TLS] = None) -> LoadReport:
    """Drive ``model`` (``version``: latest when empty) at ``url`` with ``concurrency``
    workers for ``duration_s`` seconds (over TLS with ``tls``, or an ``https://`` URL)."""
    client = client_for(url, protocol, binary, token, tls)
    target = (model, version)
    try:
        if inputs is None:
            inputs = sample_inputs(await client.model_metadata(model, version))
        await _drive(client, target, inputs, concurrency, warmup_s, None)
        latencies, errors, first_error = [], [0], [""]
        started = time.monotonic()
        await _drive(client, target, inputs, concurrency, duration_s, max_requests,
                     latencies, errors, first_error)
        elapsed = time.monotonic() - started
    finally:
        await client.close()
    return LoadReport(protocol, concurrency, elapsed, latencies, errors[0], first_error[0])


def client_for(url: str, protocol: str, binary: bool, token: Optional[str], tls: Optional[TLS] = None):
    if protocol == "http":
        return AsyncHTTPClient(url, token=token, binary=binary, tls=tls)
    if protocol == "grpc":
        return AsyncGRPCClient(url.split("://", 1)[-1], token=token, tls=tls)
    raise ValueError(f"protocol: expected 'http' or 'grpc', got {protocol!r}")


async def _drive(client, target, inputs, concurrency, duration_s, max_requests,
                 latencies=None, errors=None, first_error=None) -> None:
    model, version = target
    deadline = time.monotonic() + duration_s
    budget = [max_requests if max_requests is not None else float("inf")]

    async def worker():
        while time.monotonic() < deadline and budget[0] > 0:
            budget[0] -= 1
            sent = time.perf_counter()
            try:
                await client.infer(model, inputs, version=version)
            except ClientError as exc:
                if errors is not None:
                    errors[0] += 1
                    first_error[0] = first_error[0] or str(exc)
                continue
            if latencies is not None:
                latencies.append(time.perf_counter() - sent)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
