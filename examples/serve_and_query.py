"""Serve a model and query it over HTTP and gRPC, all on loopback.

Builds a small ONNX MLP (or serves the saved graph directory / .onnx file given
as the first argument), starts flowserve in a background thread, asks gRPC's standard
health service (what Kubernetes' gRPC probes call) whether it serves, and queries it
with the HTTP client (binary tensors), the HTTP client with JSON tensors, the gRPC
client, and 16 concurrent calls of the asyncio gRPC client (one HTTP/2 connection)::

    python examples/serve_and_query.py              # builds a demo model
    python examples/serve_and_query.py my_saved_dir  # or serves yours
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from flowserve.clients import AsyncGRPCClient, GRPCClient, HTTPClient
from flowserve.server import InferenceServer, ServerSettings


def demo_model(path: pathlib.Path) -> pathlib.Path:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w"),
               numpy_helper.from_array(np.zeros(3, np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1)],
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 3])],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.save(model, path)
    return path


async def concurrent_grpc(address: str, name: str, inputs: dict, calls: int = 16) -> list:
    """``calls`` requests in flight at once on one connection; their outputs."""
    async with AsyncGRPCClient(address) as client:
        return await asyncio.gather(*(client.infer(name, inputs) for _ in range(calls)))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = sys.argv[1] if len(sys.argv) > 1 else demo_model(pathlib.Path(tmp) / "demo.onnx")
        settings = ServerSettings(model_path=str(source), http_port=0, grpc_port=0,
                                  log_level="warning")
        with InferenceServer(settings).background() as server:
            http = HTTPClient(server.http_url)
            (name,) = [row["name"] for row in http.repository_index()]
            metadata = http.model_metadata(name)
            shape = [1 if d == -1 else d for d in metadata["inputs"][0]["shape"]]
            x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
            inputs = {metadata["inputs"][0]["name"]: x}
            print(f"serving {name!r} at {server.http_url} and grpc://{server.grpc_address}")
            grpc_client = GRPCClient(server.grpc_address)
            print(f"grpc.health.v1 Check: server {grpc_client.health()}, "
                  f"model {name!r} {grpc_client.health(name)}")
            for label, client in (("HTTP binary", http),
                                  ("HTTP JSON", HTTPClient(server.http_url, binary=False)),
                                  ("gRPC", grpc_client)):
                started = time.perf_counter()
                outputs = client.infer(name, inputs)
                took_ms = (time.perf_counter() - started) * 1e3
                first = next(iter(outputs.values()))
                print(f"{label:<12} {took_ms:6.2f} ms  -> {np.round(first.reshape(-1)[:5], 4)}")
            started = time.perf_counter()
            answers = asyncio.run(concurrent_grpc(server.grpc_address, name, inputs))
            took_ms = (time.perf_counter() - started) * 1e3
            same = all(np.array_equal(next(iter(a.values())), first) for a in answers)
            print(f"{len(answers)} asyncio gRPC calls at once: {took_ms:.2f} ms, "
                  f"all equal to the gRPC answer: {same}")


if __name__ == "__main__":
    main()
