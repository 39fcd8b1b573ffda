"""Large binary infer bodies: received into one aligned buffer, decoded without copies.

Bodies of 64 KiB or more with a binary header go into a ``BodySink`` as they arrive; these
tests drive the real server over raw sockets so the body arrives in uneven pieces, next to
pipelined requests, after ``Expect: 100-continue``, and cut off by a disconnect.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from flowserve.clients import AsyncHTTPClient, HTTPClient
from flowserve.server.http.app import SINK_MIN_BYTES, BodySink
from flowserve.server.http.codec import PlanCache, decode_infer_request

from .conftest import running_server

WIDTH = 32768  # 128 KiB of FP32 per row


def doubler() -> onnx.ModelProto:
    """``y = 2 * x`` (FP32 rows of ``WIDTH``) and ``t = tag`` (3 UINT8 per row)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"]), helper.make_node("Identity", ["tag"], ["t"])],
        "doubler",
        [helper.make_tensor_value_info("tag", TensorProto.UINT8, ["n", 3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", WIDTH]),
         helper.make_tensor_value_info("t", TensorProto.UINT8, ["n", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("large")
    (root / "doubler" / "1").mkdir(parents=True)
    onnx.save(doubler(), root / "doubler" / "1" / "model.onnx")
    (root / "doubler" / "config.json").write_text(json.dumps({"max_batch_size": 8}))
    return root


@pytest.fixture(scope="module")
def server(repository):
    with running_server(repository, max_request_bytes=1 << 21) as running:
        yield running


def binary_body(inputs: dict) -> tuple[int, bytes]:
    """JSON header length and body of a binary infer of ``{name: (datatype, array)}`` (in
    order), every output asked binary."""
    header = json.dumps({
        "inputs": [{"name": name, "datatype": datatype, "shape": list(array.shape),
                    "parameters": {"binary_data_size": array.nbytes}}
                   for name, (datatype, array) in inputs.items()],
        "parameters": {"binary_data_output": True}}).encode()
    return len(header), header + b"".join(array.tobytes() for _, array in inputs.values())


def tags(rows: int) -> np.ndarray:
    return np.arange(3 * rows, dtype=np.uint8).reshape(-1, 3)


def request(x: np.ndarray, extra: str = "") -> tuple[bytes, bytes]:
    """Head and body of an infer of ``x`` after its ``tags`` (3 bytes a row, so ``x``
    starts at an odd offset)."""
    header_length, body = binary_body({"tag": ("UINT8", tags(len(x))), "x": ("FP32", x)})
    head = (f"POST /v2/models/doubler/infer HTTP/1.1\r\nHost: x\r\n{extra}"
            f"Inference-Header-Content-Length: {header_length}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head, body


def read_answer(reader) -> tuple[int, dict]:
    """Status and outputs (``{name: array}``, or the error body) of one answer."""
    status = int(reader.readline().split()[1])
    headers = {}
    for line in iter(reader.readline, b"\r\n"):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = reader.read(int(headers["content-length"]))
    if status != 200:
        return status, json.loads(body)
    length = int(headers["inference-header-content-length"])
    outputs, offset = {}, length
    for output in json.loads(body[:length])["outputs"]:
        size = output["parameters"]["binary_data_size"]
        dtype = np.float32 if output["datatype"] == "FP32" else np.uint8
        outputs[output["name"]] = np.frombuffer(body[offset:offset + size], dtype).reshape(output["shape"])
        offset += size
    return status, outputs


def images(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, WIDTH)).astype(np.float32)


def check(outputs: dict, x: np.ndarray) -> None:
    np.testing.assert_array_equal(outputs["y"], 2 * x)
    np.testing.assert_array_equal(outputs["t"], tags(len(x)))


def test_a_large_body_arriving_in_uneven_pieces(server):
    """Cut anywhere (inside the head, the JSON header, the tensors), with pauses so the
    server reads each piece on its own: the answer is exact."""
    x = images(3, seed=1)
    head, body = request(x)
    data = head + body
    cuts = sorted({7, len(head) - 1, len(head) + 5, len(head) + 200, 70_001, 200_000, 333_333,
                   len(data) - 1})
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for start, end in zip([0] + cuts, cuts + [len(data)]):
            sock.sendall(data[start:end])
            time.sleep(0.02)
        status, outputs = read_answer(sock.makefile("rb"))
    assert status == 200, outputs
    check(outputs, x)


def test_pipelined_large_and_small_requests_keep_their_order(server):
    xs = [images(2, seed=2), images(1, seed=3), images(4, seed=4)]
    small = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    stream = b"".join(b"".join(request(x)) for x in xs[:2]) + small + b"".join(request(xs[2]))
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        sock.sendall(stream)
        reader = sock.makefile("rb")
        first, second = read_answer(reader), read_answer(reader)
        assert int(reader.readline().split()[1]) == 200  # the health check
        for line in iter(reader.readline, b"\r\n"):
            if line.lower().startswith(b"content-length"):
                length = int(line.split(b":")[1])
        reader.read(length)
        third = read_answer(reader)
    for (status, outputs), x in zip((first, second, third), xs):
        assert status == 200, outputs
        check(outputs, x)


def test_a_large_body_after_expect_100_continue(server):
    x = images(2, seed=5)
    head, body = request(x, extra="Expect: 100-continue\r\n")
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        sock.sendall(head)
        reader = sock.makefile("rb")
        assert reader.readline() == b"HTTP/1.1 100 Continue\r\n" and reader.readline() == b"\r\n"
        sock.sendall(body)
        status, outputs = read_answer(reader)
    assert status == 200, outputs
    check(outputs, x)


def test_a_client_leaving_mid_body_costs_nothing_else(server):
    head, body = request(images(4, seed=6))
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
            sock.sendall(head + body[:len(body) // 2])
    x = images(1, seed=7)
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        sock.sendall(b"".join(request(x)))
        status, outputs = read_answer(sock.makefile("rb"))
    assert status == 200, outputs
    check(outputs, x)


def test_limits_and_tokens_are_checked_before_any_body_is_read(repository):
    """A large body over ``--max-request-bytes`` is refused (413) and an unauthorized one
    answered 401 from the head alone; one within the limit is served."""
    token = "Authorization: Bearer s3cret\r\n"
    with running_server(repository, max_request_bytes=200_000, auth_token="s3cret") as server:
        for head, expected in ((request(images(1, seed=8))[0], 401),
                               (request(images(2, seed=9), extra=token)[0], 413)):
            with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
                sock.sendall(head)  # no body sent: the answer needs none
                status, answer = read_answer(sock.makefile("rb"))
            assert status == expected, answer
        x = images(1, seed=8)
        head, body = request(x, extra=token)
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
            sock.sendall(head + body)
            status, outputs = read_answer(sock.makefile("rb"))
        assert status == 200, outputs
        check(outputs, x)


@pytest.mark.parametrize("header_length", [1, 7, 64, 333])
def test_the_sink_puts_the_binary_part_on_a_64_byte_boundary(header_length):
    sink = BodySink(SINK_MIN_BYTES + header_length, header_length)
    sink.write(b"{" * header_length)
    sink.write(b"\0" * SINK_MIN_BYTES)
    binary = np.frombuffer(sink.body()[header_length:], np.uint8)
    assert binary.ctypes.data % 64 == 0 and len(sink.body()) == SINK_MIN_BYTES + header_length


def sunk(header_length: int, body: bytes) -> memoryview:
    """``body`` written into a ``BodySink`` in 50,000-byte chunks."""
    sink = BodySink(len(body), header_length)
    for start in range(0, len(body), 50_000):
        sink.write(body[start:start + 50_000])
    return sink.body()


@pytest.mark.parametrize("plans", [None, PlanCache()], ids=["parsed", "planned"])
def test_tensors_decode_as_views_of_the_sink_where_aligned(plans):
    """Aligned tensors share the sink's memory; ``x`` after 3 tag bytes is copied to an
    aligned array. Every value is exact, the second time too (a remembered plan)."""
    x = images(1, seed=10)
    for inputs in ({"x": ("FP32", x), "tag": ("UINT8", tags(1))},
                   {"tag": ("UINT8", tags(1)), "x": ("FP32", x)}):
        header_length, body = binary_body(inputs)
        for _ in range(2):
            view = sunk(header_length, body)
            request_, _ = decode_infer_request(view, str(header_length), "doubler", plans=plans)
            decoded, memory = request_.inputs["x"], np.frombuffer(view, np.uint8)
            np.testing.assert_array_equal(decoded, x)
            np.testing.assert_array_equal(request_.inputs["tag"], tags(1))
            assert decoded.flags.aligned
            assert np.shares_memory(decoded, memory) == (list(inputs)[0] == "x")
            assert np.shares_memory(request_.inputs["tag"], memory)


def test_the_clients_send_large_tensors_from_the_arrays_memory(server):
    """``HTTPClient`` and ``AsyncHTTPClient`` send a large contiguous tensor as a view of its
    array (and a non-contiguous one as its bytes): the server gets every value."""
    x = images(3, seed=11)
    url = f"http://127.0.0.1:{server.http_port}"
    for array in (x, np.asfortranarray(x)):
        inputs = {"tag": tags(3), "x": array}
        with HTTPClient(url) as client:
            check(client.infer("doubler", inputs), x)

        async def infer(inputs=inputs):
            async with AsyncHTTPClient(url) as client:
                return await client.infer("doubler", inputs)

        check(asyncio.run(infer()), x)


def test_a_large_json_body_with_nan_and_infinity_is_served_exactly(server):
    """A JSON body as Triton's clients write it (random FP32 bit patterns, ``NaN`` and
    ``Infinity`` literals): its long data arrays are parsed by simdjson, and the answer is
    what the model gives on the values ``json`` reads."""
    bits = np.random.default_rng(12).integers(0, 2**32, 2 * WIDTH, dtype=np.uint64)
    x = bits.astype(np.uint32).view(np.float32).reshape(2, WIDTH)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    body = json.dumps({
        "inputs": [{"name": "tag", "datatype": "UINT8", "shape": [2, 3], "data": tags(2).tolist()},
                   {"name": "x", "datatype": "FP32", "shape": [2, WIDTH], "data": x.tolist()}],
        "parameters": {"binary_data_output": True}}).encode()
    assert b"NaN" in body and b"-Infinity" in body and len(body) > 1 << 20
    head = (f"POST /v2/models/doubler/infer HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        sock.sendall(head + body)
        status, outputs = read_answer(sock.makefile("rb"))
    assert status == 200, outputs
    expected = np.array(json.loads(body)["inputs"][1]["data"], np.float32)
    np.testing.assert_array_equal(outputs["y"].view(np.uint32), (2 * expected).view(np.uint32))
    np.testing.assert_array_equal(outputs["t"], tags(2))
