"""Compressed requests and answers, over HTTP and gRPC, with Triton's own client.

flowserve inflates gzip and deflate request bodies (HTTP ``Content-Encoding``; gRPC
``grpc-encoding`` when served with ``--grpc-compression gzip``, as here: by default a
compressed gRPC request is refused) and compresses answers of 1 KiB or more for clients that ask
(HTTP ``Accept-Encoding``; gRPC with ``--grpc-infer-response-compression-level``).
This example serves a 1000-class linear model, then calls it with tritonclient's
compression options and with a plain HTTP client to show the bytes on the wire::

    pip install "tritonclient[http,grpc]"
    python examples/compressed_requests.py
"""

from __future__ import annotations

import pathlib
import tempfile

import httpx
import numpy as np
import onnx
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from flowserve.server import InferenceServer, ServerSettings


def classifier(path: pathlib.Path) -> np.ndarray:
    """A 16-feature, 1000-class linear model at ``path``; returns its weights."""
    w = np.random.default_rng(0).standard_normal((16, 1000)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "classifier",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1000])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)
    return w


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "classifier.onnx"
        w = classifier(path)
        x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
        settings = ServerSettings(model_path=str(path), http_port=0, grpc_port=0, log_level="warning",
                                  grpc_infer_response_compression_level="low",
                                  grpc_compression="gzip")  # compressed gRPC requests too
        with InferenceServer(settings).background() as server:
            http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
            tensor = httpclient.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            y = http.infer("classifier", [tensor], request_compression_algorithm="gzip",
                           response_compression_algorithm="gzip").as_numpy("y")
            print(f"HTTP, gzip both ways: max |error| {np.abs(y - x @ w).max():.2e}")

            rpc = grpcclient.InferenceServerClient(server.grpc_address)
            tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            y = rpc.infer("classifier", [tensor], compression_algorithm="deflate").as_numpy("y")
            print(f"gRPC, deflate request, gzip answer: max |error| {np.abs(y - x @ w).max():.2e}")

            body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                "data": x.ravel().tolist()}]}
            with httpx.Client(base_url=server.http_url) as client:  # httpx asks for gzip itself
                answer = client.post("/v2/models/classifier/infer", json=body)
                print(f"JSON answer: {len(answer.content):,} bytes, {answer.num_bytes_downloaded:,} on the "
                      f"wire ({answer.headers.get('content-encoding', 'identity')})")


if __name__ == "__main__":
    main()
