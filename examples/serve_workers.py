"""Serve one model from two worker processes behind the same port (``--workers 2``).

Each request below opens a connection of its own, so the kernel spreads them over
the workers; ``/metrics``, answered by either worker, counts the requests of both
(workers share their figures every second)::

    python examples/serve_workers.py
    flowserve serve model.onnx --workers 2      # the same from the shell
"""

from __future__ import annotations

import pathlib
import re
import tempfile
import time

import numpy as np

from flowserve.clients import HTTPClient
from flowserve.server import ServerSettings, WorkerPool
from serve_and_query import demo_model  # the small classifier of the first example


def served(url: str) -> int:
    text = HTTPClient(url).request("GET", "/metrics")[2].decode()
    return int(sum(float(v) for v in re.findall(
        r"^flowserve_request_success_total\{[^}]*\} (\S+)$", text, re.M)))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model = demo_model(pathlib.Path(tmp) / "demo.onnx")
        settings = ServerSettings(model_path=str(model), http_port=0, grpc_port=0,
                                  log_level="warning", workers=2)
        pool = WorkerPool(settings)
        with pool.background():
            print(f"{len(pool.processes)} workers at {pool.http_url} and "
                  f"grpc://{pool.grpc_address}")
            x = np.random.default_rng(1).standard_normal((1, 4)).astype(np.float32)
            for _ in range(20):
                outputs = HTTPClient(pool.http_url).infer("demo", {"x": x})
            print("probabilities", np.round(outputs["probabilities"].ravel(), 4))
            deadline = time.monotonic() + 10
            while served(pool.http_url) < 20 and time.monotonic() < deadline:
                time.sleep(0.2)
            print(f"requests counted by /metrics across the workers: {served(pool.http_url)}")


if __name__ == "__main__":
    main()
