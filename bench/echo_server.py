"""The floor the serving benches compare against: a server that does no work.

It speaks just enough of the Open Inference Protocol for perf_analyzer and the
flowserve clients (health, model metadata and config, infer) over HTTP (a bare
``httptools`` protocol on uvloop, or uvicorn) and gRPC (``grpc.aio``, the stack flowserve
serves gRPC with), and answers every infer
with the same canned output: FP32 ``y`` of shape [1, 10], binary when the request
carried ``Inference-Header-Content-Length``, JSON otherwise. Its latency and
throughput are what the framework alone costs; flowserve's own cost is the rest::

    python bench/echo_server.py 8200 8201           # HTTP port, gRPC port; model "mlp"
    python bench/echo_server.py 8200 8201 uvicorn   # HTTP through uvicorn, as flowserve
"""

from __future__ import annotations

import asyncio
import json
import sys

import grpc
import httptools
import numpy as np
import uvicorn
import uvloop

from flowserve.protocol import protos

MODEL = "mlp"
OUTPUT = np.zeros((1, 10), np.float32)
METADATA = {"name": MODEL, "versions": ["1"], "platform": "onnxruntime_onnx",
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 10]}]}
CONFIG = {"name": MODEL, "platform": "onnxruntime_onnx", "backend": "onnxruntime",
          "max_batch_size": 64,
          "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [64]}],
          "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [10]}]}


def _response(status: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n" + extra
            + b"content-length: %d\r\n\r\n" % len(body) + body)


def _http_answers() -> dict:
    json_out = {"model_name": MODEL, "outputs": [{"name": "y", "datatype": "FP32",
                                                  "shape": [1, 10], "data": OUTPUT.ravel().tolist()}]}
    binary_head = json.dumps({"model_name": MODEL, "outputs": [
        {"name": "y", "datatype": "FP32", "shape": [1, 10],
         "parameters": {"binary_data_size": OUTPUT.nbytes}}]}).encode()
    return {
        "json": _response(b"200 OK", json.dumps(json_out).encode()),
        "binary": _response(b"200 OK", binary_head + OUTPUT.tobytes(),
                            b"inference-header-content-length: %d\r\n" % len(binary_head)),
        "metadata": _response(b"200 OK", json.dumps(METADATA).encode()),
        "config": _response(b"200 OK", json.dumps(CONFIG).encode()),
        "ok": _response(b"200 OK", b"{}"),
        "missing": _response(b"404 Not Found", b'{"error":"not found"}'),
    }


ANSWERS = _http_answers()


class EchoHTTP(asyncio.Protocol):
    """HTTP/1.1 keep-alive; one canned answer per request."""

    def connection_made(self, transport) -> None:
        self.transport, self.parser = transport, httptools.HttpRequestParser(self)
        self.url, self.binary = b"", False

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url, self.binary = url, False

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"inference-header-content-length":
            self.binary = True

    def on_message_complete(self) -> None:
        self.transport.write(ANSWERS[answer_for(self.url, self.binary)])


def answer_for(url: bytes, binary: bool) -> str:
    """Which canned answer a request for ``url`` gets."""
    if url.endswith(b"/infer"):
        return "binary" if binary else "json"
    if url.endswith(b"/config"):
        return "config"
    if url.endswith(b"/ready") or url.endswith(b"/live"):
        return "ok"
    if url.startswith(b"/v2/models/" + MODEL.encode()):
        return "metadata"
    return "ok" if url.startswith(b"/v2") else "missing"


def _asgi_answer(raw: bytes) -> tuple:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    return int(lines[0].split()[1]), [tuple(line.split(b": ", 1)) for line in lines[1:]], body


ASGI_ANSWERS = {key: _asgi_answer(raw) for key, raw in ANSWERS.items()}


def _canned_grpc() -> dict:
    """The canned answer of each gRPC method."""
    infer = protos.ModelInferResponse(model_name=MODEL, model_version="1")
    tensor = infer.outputs.add()
    tensor.name, tensor.datatype = "y", "FP32"
    tensor.shape.extend([1, 10])
    infer.raw_output_contents.append(OUTPUT.tobytes())
    metadata = protos.ModelMetadataResponse(name=MODEL, versions=["1"],
                                            platform="onnxruntime_onnx")
    for spec, field in ((METADATA["inputs"][0], metadata.inputs),
                        (METADATA["outputs"][0], metadata.outputs)):
        field.add(name=spec["name"], datatype=spec["datatype"], shape=spec["shape"])
    config = protos.ModelConfigResponse()
    config.config.name, config.config.platform = MODEL, "onnxruntime_onnx"
    config.config.backend, config.config.max_batch_size = "onnxruntime", 64
    config.config.input.add(name="x", data_type="TYPE_FP32", dims=[64])
    config.config.output.add(name="y", data_type="TYPE_FP32", dims=[10])
    return {"ModelInfer": infer, "ModelMetadata": metadata, "ModelConfig": config,
            "ServerMetadata": protos.ServerMetadataResponse(name="echo", version="1"),
            "ServerLive": protos.ServerLiveResponse(live=True),
            "ServerReady": protos.ServerReadyResponse(ready=True),
            "ModelReady": protos.ModelReadyResponse(ready=True)}


def _grpc_handlers():
    handlers = {}
    for name, answer in _canned_grpc().items():
        request_cls, response_cls, _ = protos.METHODS[name]

        async def handle(request, context, answer=answer):
            return answer

        handlers[name] = grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=request_cls.FromString,
            response_serializer=response_cls.SerializeToString)
    return grpc.method_handlers_generic_handler(protos.SERVICE_NAME, handlers)


async def echo_asgi(scope, receive, send) -> None:
    """The same canned answers as an ASGI app (for uvicorn: the HTTP stack flowserve uses)."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    binary = any(k == b"inference-header-content-length" for k, _ in scope["headers"])
    status, headers, body = ASGI_ANSWERS[answer_for(scope["path"].encode(), binary)]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve(http_port: int, grpc_port: int, stacks: tuple = ()) -> None:
    loop = asyncio.get_running_loop()
    if "uvicorn" in stacks:
        config = uvicorn.Config(echo_asgi, host="127.0.0.1", port=http_port, log_config=None,
                                access_log=False, lifespan="off", http="httptools")
        http = asyncio.create_task(uvicorn.Server(config).serve())
    else:
        http = await loop.create_server(EchoHTTP, "127.0.0.1", http_port)
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((_grpc_handlers(),))
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), int(sys.argv[2]), tuple(sys.argv[3:])))
