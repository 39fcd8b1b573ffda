"""Where the server's microseconds go on one small HTTP or gRPC infer request, in process.

The MLP 64-256-10 of ``bench_serving.py``, batch 1. Each phase is timed alone on
the real objects (median of many calls, phases interleaved), then the whole
server side at once: the request bytes fed to flowserve's HTTP protocol over an
in-memory transport until the response is written, with no kernel and no
client in the figure; the model is left idle 200 µs before each request, as
between the requests of one client. The same run feeds uvicorn's plain protocol (no head
guard, no coalesced writes) for the cost of the hardening, and the gRPC request's bytes
to the servicer's ``ModelInfer`` translator (grpc-core's transport, in C, is not in it)::

    python bench/bench_http_path.py --seconds 2
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import pathlib
import tempfile
import time

import httptools
import numpy as np
import onnx
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from bench_serving import mlp_model
from flowserve.clients import grpc_client, rest
from flowserve.protocol import protos
from flowserve.server import DataPlane, ServerSettings
from flowserve.server.app import NoDelayHTTPProtocol
from flowserve.server.grpc.app import InferenceServicer
from flowserve.server.grpc.codec import decode_infer_request as decode_grpc_request
from flowserve.server.grpc.codec import encode_infer_response as encode_grpc_response
from flowserve.server.http.app import build_http_app
from flowserve.server.http.codec import decode_infer_request, encode_infer_response


class MemoryTransport(asyncio.Transport):
    """Collects what the protocol writes; ``answered`` fires once a response is out."""

    def __init__(self):
        super().__init__()
        self.written, self.answered = [], None

    def write(self, data) -> None:
        self.written.append(data)
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(None)

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 5), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def request_bytes(x: np.ndarray, binary: bool) -> bytes:
    body, headers = rest.encode_infer({"x": x}, None, binary)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (f"POST /v2/models/mlp/infer HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


async def whole_server(protocol_class, app, data: bytes, count: int) -> list[float]:
    """Seconds from the request's bytes arriving to the response written, per request."""
    loop = asyncio.get_running_loop()
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                            proxy_headers=False, server_header=False, date_header=False)
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={},
                              _loop=loop)
    transport = MemoryTransport()
    protocol.connection_made(transport)
    times = []
    for _ in range(count):
        transport.answered = loop.create_future()
        idle()
        started = time.perf_counter()
        protocol.data_received(data)
        await transport.answered
        await asyncio.sleep(0)  # the coalesced write leaves at the end of the step
        times.append(time.perf_counter() - started)
    protocol.connection_lost(None)
    return times


async def whole_grpc_servicer(servicer: InferenceServicer, body: bytes, count: int) -> list[float]:
    """Seconds from a ModelInfer request's bytes to its answer's bytes, per request."""
    times = []
    for _ in range(count):
        idle()
        started = time.perf_counter()
        await servicer.infer_bytes(body)
        times.append(time.perf_counter() - started)
    return times


def idle(gap_s: float = 0.0002) -> None:
    """Let the model be idle for ``gap_s`` (as between a client's requests at concurrency 1:
    the batcher then runs a lone request at once on the event loop)."""
    until = time.perf_counter() + gap_s
    while time.perf_counter() < until:
        pass


def timed(call, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


async def atimed(call, count: int) -> list[float]:
    times = []
    for _ in range(count):
        idle()
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return times


async def measure(model_path: str, x: np.ndarray, count: int, rounds: int) -> dict:
    plane = DataPlane(ServerSettings(model_path=model_path, model_name="mlp", http_port=0,
                                     grpc_port=None, log_level="warning"))
    await plane.start()
    door = build_http_app(plane)
    runner = plane.model("mlp").runners[0]
    samples: dict[str, list] = {}
    for _ in range(rounds):
        for binary in (True, False):
            kind = "binary" if binary else "JSON"
            data = request_bytes(x, binary)
            body, headers = rest.encode_infer({"x": x}, None, binary)
            header_length = {k.lower(): v for k, v in headers.items()}.get(
                "inference-header-content-length")
            decode = functools.partial(decode_infer_request, body, header_length, "mlp", "",
                                       door.plans, door.limits)
            request, wishes = decode()
            response = await plane.infer(request)
            phases = {
                f"{kind}: HTTP parse (httptools, request line + headers + body)":
                    lambda: httptools.HttpRequestParser(_Sink()).feed_data(data),
                f"{kind}: decode + checks (http_codec.decode_infer_request)": decode,
                f"{kind}: encode (http_codec.encode_infer_response)":
                    lambda: encode_infer_response(response, wishes),
            }
            for name, call in phases.items():
                samples.setdefault(name, []).extend(timed(call, count))
            samples.setdefault(f"{kind}: DataPlane.infer (validate, batcher, ORT, stats)",
                               []).extend(await atimed(lambda: plane.infer(request), count))
            for label, protocol in (("flowserve protocol (head guard, coalesced write)",
                                     NoDelayHTTPProtocol),
                                    ("uvicorn's plain protocol", HttpToolsProtocol)):
                samples.setdefault(f"{kind}: whole server side, {label}", []).extend(
                    await whole_server(protocol, door, data, count))
        await measure_grpc(plane, x, count, samples)
        samples.setdefault("ONNX Runtime run alone (OrtRunner.run)", []).extend(
            timed(lambda: runner.run({"x": x}), count))
    await plane.stop()
    return {name: float(np.median(t) * 1e6) for name, t in samples.items()}


async def measure_grpc(plane, x: np.ndarray, count: int, samples: dict) -> None:
    """The gRPC request's phases and its whole server side, added to ``samples``."""
    body = grpc_client.encode_infer("mlp", {"x": x}, None, "", "").SerializeToString()
    message = protos.ModelInferRequest.FromString(body)
    response = await plane.infer(decode_grpc_request(message))
    phases = {
        "gRPC: protobuf parse (ModelInferRequest.FromString)":
            lambda: protos.ModelInferRequest.FromString(body),
        "gRPC: decode + checks (grpc_codec.decode_infer_request)":
            lambda: decode_grpc_request(message),
        "gRPC: encode (grpc_codec.encode_infer_response, serialized)":
            lambda: encode_grpc_response(response).SerializeToString(),
    }
    for name, call in phases.items():
        samples.setdefault(name, []).extend(timed(call, count))
    samples.setdefault("gRPC: servicer's ModelInfer, bytes to bytes (no transport)", []).extend(
        await whole_grpc_servicer(InferenceServicer(plane), body, count))


class _Sink:
    """httptools callbacks that keep nothing."""

    def on_body(self, body: bytes) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000, help="calls per phase and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "mlp.onnx"
        onnx.save(mlp_model(), path)
        try:
            import uvloop
            figures = uvloop.run(measure(str(path), x, args.count, args.rounds))
        except ImportError:
            figures = asyncio.run(measure(str(path), x, args.count, args.rounds))
    print(f"{'phase (median per request)':<84} {'us':>7}")
    for name, micros in figures.items():
        print(f"{name:<84} {micros:>7.1f}")
    print(f"\nload average {os.getloadavg()[0]:.2f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
