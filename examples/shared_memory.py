"""Tensors through system shared memory instead of the request body, with Triton's client.

A client on the same machine as the server puts its input in a POSIX shared-memory
object, registers a region of it, and asks for the output to be written back into it:
no tensor bytes cross the socket. The server must be started with
``--allow-client-shm`` (here ``allow_client_shm=True``). This example serves a
64-feature, 10-class linear model and runs the round trip over HTTP and gRPC::

    pip install "tritonclient[http,grpc]"
    python examples/shared_memory.py
"""

from __future__ import annotations

import pathlib
import tempfile
from multiprocessing import shared_memory

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from flowserve.server import InferenceServer, ServerSettings


def linear(path: pathlib.Path) -> np.ndarray:
    """A 64-feature, 10-class linear model at ``path``; returns its weights."""
    w = np.random.default_rng(0).standard_normal((64, 10)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "linear",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)
    return w


def round_trip(client, module, shm: shared_memory.SharedMemory, x: np.ndarray) -> np.ndarray:
    """Input at the start of the object, output right after it; returns the output."""
    np.ndarray(x.shape, x.dtype, shm.buf)[:] = x
    client.register_system_shared_memory("io", "/" + shm.name, shm.size)
    try:
        tensor = module.InferInput("x", list(x.shape), "FP32")
        tensor.set_shared_memory("io", x.nbytes)
        wanted = module.InferRequestedOutput("y")
        wanted.set_shared_memory("io", shm.size - x.nbytes, offset=x.nbytes)
        client.infer("linear", [tensor], outputs=[wanted])
        return np.ndarray((len(x), 10), np.float32, shm.buf, offset=x.nbytes).copy()
    finally:
        client.unregister_system_shared_memory("io")


def main() -> None:
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    shm = shared_memory.SharedMemory(create=True, size=x.nbytes + 4096)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "linear.onnx"
            w = linear(path)
            settings = ServerSettings(model_path=str(path), http_port=0, grpc_port=0,
                                      log_level="warning", allow_client_shm=True)
            with InferenceServer(settings).background() as server:
                http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
                y = round_trip(http, httpclient, shm, x)
                print(f"HTTP, input and output in /dev/shm/{shm.name}: "
                      f"max |error| {np.abs(y - x @ w).max():.2e}")
                rpc = grpcclient.InferenceServerClient(server.grpc_address)
                y = round_trip(rpc, grpcclient, shm, 2 * x)
                print(f"gRPC, the same region: max |error| {np.abs(y - 2 * x @ w).max():.2e}")
    finally:
        shm.close()
        shm.unlink()


if __name__ == "__main__":
    main()
