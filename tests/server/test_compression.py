"""Compressed bodies: HTTP Content-Encoding / Accept-Encoding on the infer route (as
tritonclient's request_compression_algorithm and response_compression_algorithm use them),
gRPC answers compressed under --grpc-infer-response-compression-level, and the shared
inflate/deflate helpers' bounds."""

from __future__ import annotations

import gzip
import json
import socket
import struct
import zlib

import numpy as np
import onnx
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from flowserve.clients import grpc_client
from flowserve.protocol import protos
from flowserve.server.compression import (
    InflateError,
    InflateLimitError,
    deflate,
    inflate,
    preferred_encoding,
)

from .conftest import running_server
from .h2client import RawH2, grpc_headers, message
from .models import mlp, mlp_reference

X = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)


@pytest.fixture(scope="module")
def wide_file(tmp_path_factory):
    """An MLP whose answers are large enough to be worth compressing (2 x 512 floats)."""
    path = tmp_path_factory.mktemp("wide") / "wide.onnx"
    onnx.save(mlp((4, 16, 512), seed=3), path)
    return path


@pytest.fixture(scope="module")
def server(wide_file):
    with running_server(wide_file, grpc_infer_response_compression_level="high",
                        grpc_compression="gzip") as running:
        yield running


def _close(actual, wide_file):
    np.testing.assert_allclose(actual, mlp_reference(onnx.load(str(wide_file)), X), rtol=1e-5, atol=1e-5)


# -- the helpers -------------------------------------------------------------------------------


@pytest.mark.parametrize("accepted, chosen", [
    ("gzip", "gzip"), ("deflate", "deflate"), ("gzip, deflate", "gzip"), ("deflate, gzip", "gzip"),
    ("gzip;q=0.5, deflate", "deflate"), ("GZIP ; q=1.0", "gzip"), ("gzip;q=0", None),
    ("br, zstd", None), ("identity", None), ("*", "gzip"), ("", None), (None, None),
    ("gzip;q=oops, deflate;q=0.1", "deflate"),
])
def test_the_preferred_encoding_follows_the_quality_values(accepted, chosen):
    assert preferred_encoding(accepted) == chosen


def test_inflate_bounds_what_a_body_may_grow_to():
    data = np.arange(5000, dtype=np.float32).tobytes()
    for encoding in ("gzip", "deflate"):
        assert inflate(deflate(data, encoding, 1), encoding, len(data)) == data
        with pytest.raises(InflateLimitError, match=f"inflates past {len(data) - 1} bytes"):
            inflate(deflate(data, encoding, 9), encoding, len(data) - 1)
    assert inflate(gzip.compress(data), "gzip", len(data)) == data  # the standard library's gzip
    with pytest.raises(InflateLimitError):  # a bomb: 20 MB of zeros in ~20 kB
        inflate(gzip.compress(b"\0" * (20 << 20)), "gzip", 1 << 20)
    with pytest.raises(InflateError, match="does not inflate"):
        inflate(b"not gzip at all", "gzip", 1000)
    with pytest.raises(InflateError, match="ends before its end marker"):
        inflate(gzip.compress(data)[:-20], "gzip", len(data))


# -- HTTP --------------------------------------------------------------------------------------


@pytest.mark.parametrize("request_algorithm", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_algorithm", [None, "gzip", "deflate"])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_http_compression(server, wide_file, request_algorithm, response_algorithm, binary):
    client = triton_http.InferenceServerClient(server.http_url.removeprefix("http://"))
    tensor = triton_http.InferInput("x", list(X.shape), "FP32")
    tensor.set_data_from_numpy(X, binary_data=binary)
    output = triton_http.InferRequestedOutput("y", binary_data=binary)
    result = client.infer("wide", [tensor], outputs=[output], request_compression_algorithm=request_algorithm,
                          response_compression_algorithm=response_algorithm)
    _close(result.as_numpy("y"), wide_file)
    client.close()


def _post(port: int, body: bytes, headers: str) -> tuple[int, dict, bytes]:
    head = (f"POST /v2/models/wide/infer HTTP/1.1\r\nHost: x\r\n{headers}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + body)
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    head, _, payload = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    fields = dict((k.lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:]))
    return int(lines[0].split()[1]), fields, payload


def _json_body(x: np.ndarray) -> bytes:
    return json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()


def test_http_answers_are_compressed_only_when_asked_and_worth_it(server, wide_file):
    status, fields, payload = _post(server.http_port, _json_body(X), "Accept-Encoding: deflate;q=0.9, br\r\n")
    assert status == 200 and fields["content-encoding"] == "deflate"
    _close(np.array(json.loads(zlib.decompress(payload))["outputs"][0]["data"]).reshape(2, 512), wide_file)
    status, fields, payload = _post(server.http_port, _json_body(X), "")  # not asked
    assert status == 200 and "content-encoding" not in fields and json.loads(payload)["outputs"]
    small = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}],
                        "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
    status, fields, _ = _post(server.http_port, small, "Accept-Encoding: gzip\r\n")  # 2 KiB: compressed
    assert status == 200 and fields["content-encoding"] == "gzip"


def test_http_compression_level_none_never_compresses(wide_file):
    with running_server(wide_file, http_infer_response_compression_level="none") as plain:
        status, fields, payload = _post(plain.http_port, _json_body(X), "Accept-Encoding: gzip\r\n")
    assert status == 200 and "content-encoding" not in fields and json.loads(payload)["outputs"]


@pytest.mark.parametrize("body, headers, status, words", [
    (b"irrelevant", "Content-Encoding: br\r\n", 415, "Content-Encoding 'br': this server inflates gzip or deflate"),
    (b"not gzip", "Content-Encoding: gzip\r\n", 400, "Content-Encoding gzip, but gzip data that does not inflate"),
    (gzip.compress(b" " * (3 << 20)), "Content-Encoding: gzip\r\n", 413, "gzip data inflating past the limit of"),
    (zlib.compress(b'{"inputs": 5}'), "Content-Encoding: deflate\r\n", 400, "inputs"),
], ids=["unknown-encoding", "not-gzip", "gzip-bomb", "inflated-but-wrong"])
def test_bad_compressed_bodies_get_clear_errors(wide_file, body, headers, status, words):
    with running_server(wide_file, max_request_bytes=1 << 20) as small:
        got, _, payload = _post(small.http_port, body, headers)
        assert got == status and words in json.loads(payload)["error"], payload
        assert _post(small.http_port, _json_body(X), "")[0] == 200  # and the server goes on


# -- gRPC --------------------------------------------------------------------------------------


def _grpc_call(server, accept: str | None):
    client = RawH2(server.grpc_address)
    extra = {"grpc-accept-encoding": accept} if accept else {}
    body = grpc_client.encode_infer("wide", {"x": X}, None, "", "").SerializeToString()
    headers, data, trailers = client.call(message(body), grpc_headers(**extra))
    client.close()
    assert trailers["grpc-status"] == "0"
    compressed, size = struct.unpack(">BL", data[:5])
    assert size == len(data) - 5
    return headers.get("grpc-encoding"), compressed, data[5:]


def test_grpc_answers_are_compressed_for_clients_that_accept_it(server, wide_file):
    encoding, compressed, payload = _grpc_call(server, "identity,deflate,gzip")  # as grpc-core sends it
    assert encoding in ("gzip", "deflate") and compressed == 1  # grpc-core's choice for the level
    inflated = gzip.decompress(payload) if encoding == "gzip" else zlib.decompress(payload)
    reply = protos.ModelInferResponse.FromString(inflated)
    _close(np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(2, 512), wide_file)
    assert len(payload) < len(reply.raw_output_contents[0])
    encoding, compressed, payload = _grpc_call(server, None)  # accepts nothing: as it is
    assert (encoding, compressed) == (None, 0)
    assert protos.ModelInferResponse.FromString(payload).raw_output_contents[0] == reply.raw_output_contents[0]


def test_grpc_answers_are_not_compressed_by_default(wide_file):
    with running_server(wide_file) as plain:
        assert _grpc_call(plain, "gzip")[:2] == (None, 0)


def test_tritonclient_grpc_reads_compressed_answers(server, wide_file):
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    tensor = triton_grpc.InferInput("x", list(X.shape), "FP32")
    tensor.set_data_from_numpy(X)
    for algorithm in (None, "gzip", "deflate"):
        _close(client.infer("wide", [tensor], compression_algorithm=algorithm).as_numpy("y"), wide_file)
    client.close()
