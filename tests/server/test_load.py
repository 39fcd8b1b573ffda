"""Batching under concurrency and a bounded load run with memory watched."""

from __future__ import annotations

import asyncio
import json
import re

import numpy as np
import onnx
import pytest

from flowserve.clients import AsyncGRPCClient, AsyncHTTPClient
from flowserve.server.runner import OrtRunner

from .conftest import running_server
from .models import mlp


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("batching")
    (root / "mlp" / "1").mkdir(parents=True)
    onnx.save(mlp((64, 256, 10), seed=3), root / "mlp" / "1" / "model.onnx")
    (root / "mlp" / "config.json").write_text(json.dumps({
        "max_batch_size": 64, "dynamic_batching": {"max_queue_delay_us": 20000,
                                                   "preferred_batch_size": [64]}}))
    with running_server(root) as server:
        yield server, root / "mlp" / "1" / "model.onnx"


def _metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M))


def test_64_concurrent_clients_get_unbatched_results_in_large_batches(batching_server):
    server, model_file = batching_server
    rows = np.random.default_rng(0).standard_normal((64 * 4, 64)).astype(np.float32)
    runner = OrtRunner(onnx.load(str(model_file)), device="cpu")
    expected = [runner.run({"x": rows[i:i + 1]})["y"] for i in range(len(rows))]

    async def client(index, http, grpc_client):
        results = []
        for k in range(4):
            row = index * 4 + k
            use_grpc = (index + k) % 2
            x = rows[row:row + 1]
            out = await (grpc_client.infer("mlp", {"x": x}) if use_grpc
                         else http.infer("mlp", {"x": x}))
            results.append((row, out["y"]))
        return results

    async def main():
        async with AsyncHTTPClient(server.http_url) as http:
            async with AsyncGRPCClient(server.grpc_address) as grpc_client:
                batches = await asyncio.wait_for(
                    asyncio.gather(*(client(i, http, grpc_client) for i in range(64))), 60)
                metrics = (await http.request("GET", "/metrics"))[2].decode()
        return [r for batch in batches for r in batch], metrics

    results, metrics = asyncio.run(main())
    assert len(results) == 256
    for row, y in results:
        np.testing.assert_array_equal(y, expected[row])  # bit-identical
    inferences = _metric(metrics, "flowserve_inference_count_total")
    executions = _metric(metrics, "flowserve_execution_count_total")
    assert inferences >= 256
    assert inferences / executions > 8, (inferences, executions)


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.slow
def test_20000_requests_at_concurrency_64_without_errors_or_leaks(batching_server):
    server, _ = batching_server
    x = np.ones((1, 64), np.float32)

    async def run(total):
        budget = [total]
        errors = []

        async def worker(http):
            while budget[0] > 0:
                budget[0] -= 1
                try:
                    await http.infer("mlp", {"x": x})
                except Exception as exc:  # counted, the assertion shows the first
                    errors.append(exc)

        async with AsyncHTTPClient(server.http_url) as http:
            await asyncio.wait_for(asyncio.gather(*(worker(http) for _ in range(64))), 55)
        return errors

    assert asyncio.run(run(2000)) == []  # warmup
    before = _rss_mb()
    errors = asyncio.run(run(20000))
    growth = _rss_mb() - before
    assert errors == [], errors[:3]
    assert growth < 50, f"RSS grew {growth:.1f} MB"
