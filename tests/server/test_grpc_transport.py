"""The gRPC port (grpcio's server): flow control, limits, deadlines, compression and
protocol violations, against a real server, with raw frames and with grpcio."""

from __future__ import annotations

import contextlib
import gzip
import random
import socket
import struct
import time

import grpc
import numpy as np
import pytest
from onnx import TensorProto

from flowserve.clients import grpc_client
from flowserve.protocol import protos
from flowserve.clients import http2_wire as wire
from flowserve.server.grpc.app import MAX_CONCURRENT_STREAMS

from . import hostile
from .conftest import running_server
from .h2client import PATH, RawH2, grpc_headers, message

MAX_REQUEST_BYTES = 16 << 20


class Status:
    """gRPC status codes as grpc-status carries them."""

    DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0], grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    INVALID_ARGUMENT, INTERNAL = grpc.StatusCode.INVALID_ARGUMENT.value[0], grpc.StatusCode.INTERNAL.value[0]
    UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
WIDE = 4096
ENHANCE_YOUR_CALM = 0xB  # grpc-core's RST_STREAM for a stream over the advertised limit  # columns of the FP32 identity model "wide"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = hostile.request_repository(tmp_path_factory.mktemp("h2") / "repo")
    hostile.write_model(root / "wide" / "1",
                        hostile.identity_model("x", "y", TensorProto.FLOAT, WIDE))
    (root / "wide" / "config.json").write_text('{"max_batch_size": 0}')
    with running_server(root, header_timeout_s=1.0, max_request_bytes=MAX_REQUEST_BYTES,
                        auth_token=None, grpc_compression="gzip") as running:
        yield running


def _infer_body(model: str, x: np.ndarray) -> bytes:
    return grpc_client.encode_infer(model, {"x": x}, None, "", "").SerializeToString()


def _stub(channel, method: str = "ModelInfer", **options):
    request_cls, response_cls, _ = protos.METHODS[method]
    return channel.unary_unary(f"/{protos.SERVICE_NAME}/{method}",
                               request_serializer=request_cls.SerializeToString,
                               response_deserializer=response_cls.FromString)


def _good_call(server) -> None:
    """The server still answers a fresh connection correctly."""
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    with grpc.insecure_channel(server.grpc_address) as channel:
        reply = _stub(channel)(grpc_client.encode_infer("good", {"x": x}, None, "", ""),
                               timeout=30)
    assert reply.model_name == "good" and len(reply.raw_output_contents) == 1


# -- calls through a raw connection -----------------------------------------------------------


def test_a_raw_client_gets_headers_one_message_and_ok_trailers(server):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    client = RawH2(server.grpc_address)
    for _ in range(3):  # the second call's header block is all indexed (the cached path)
        headers, data, trailers = client.call(message(_infer_body("good", x)))
        assert headers[":status"] == "200" and headers["content-type"] == "application/grpc"
        assert trailers["grpc-status"] == "0"
        reply = protos.ModelInferResponse.FromString(data[5:])
        assert struct.unpack(">BL", data[:5]) == (0, len(data) - 5)
        assert reply.outputs[0].shape == [1, 3]
    client.close()


def test_a_message_whole_before_the_stream_ends_is_one_call(server):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    client = RawH2(server.grpc_address)
    stream = client.new_stream()
    client.send_headers(stream, grpc_headers())
    client.send_data(stream, message(_infer_body("good", x)), end_stream=False)
    client.send(wire.DATA, wire.END_STREAM, stream)  # an empty frame ends the request
    kind, flags, _, payload = client.until(wire.DATA, stream)
    assert protos.ModelInferResponse.FromString(payload[5:]).outputs[0].shape == [1, 3]
    kind, flags, _, payload = client.until(wire.HEADERS, stream)
    assert payload["grpc-status"] == "0"
    client.close()


def test_frames_cut_anywhere_across_reads_make_the_same_call(server):
    """The preface, a header block and one DATA frame of 48 KiB (within the window a stream
    may send before the server asks for its message, --grpc-receive-window-bytes) written in
    pieces of uneven sizes, each its own read on the server: the frames are put back
    together, and the answer is the input."""
    x = np.random.default_rng(0).standard_normal((3, WIDE)).astype(np.float32)
    client = RawH2(server.grpc_address, preface=False)
    body = message(grpc_client.encode_infer("wide", {"x": x}, None, "", "").SerializeToString())
    big = (1 << 31) - 1  # windows wide enough for the whole answer
    client.until(wire.SETTINGS)  # acknowledged below: no byte follows the DATA frame
    wire_bytes = (wire.PREFACE + wire.frame(wire.SETTINGS, 0, 0, struct.pack(
                      ">HL", wire.SETTINGS_INITIAL_WINDOW_SIZE, big))
                  + wire.frame(wire.SETTINGS, wire.ACK, 0)
                  + wire.frame(wire.WINDOW_UPDATE, 0, 0, struct.pack(">L", big - 65535))
                  + wire.frame(wire.HEADERS, wire.END_HEADERS, 1, client.encoder.encode(grpc_headers()))
                  + wire.frame(wire.DATA, wire.END_STREAM, 1, body))
    client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    position, sizes = 0, [1, 7, 16, 9, 3, 40, 5000, 1, 65536, 8, 100000]
    while position < len(wire_bytes):
        size = sizes[0] if sizes else 200000
        sizes = sizes[1:]
        client.sock.sendall(wire_bytes[position:position + size])
        position += size
        time.sleep(0.002)
    data = b""
    while (got := client.until(wire.DATA, 1)) is not None and not got[1] & wire.END_STREAM:
        data += got[3]
        if len(data) >= 5 and len(data) == 5 + struct.unpack(">L", data[1:5])[0]:
            break
    reply = protos.ModelInferResponse.FromString(data[5:])
    assert reply.outputs[0].shape == [3, WIDE]
    np.testing.assert_array_equal(np.frombuffer(reply.raw_output_contents[0], np.float32),
                                  x.ravel())
    client.close()


def test_large_messages_both_ways_through_grpcio(server):
    x = np.random.default_rng(0).standard_normal((700, WIDE)).astype(np.float32)  # 11 MB
    with grpc.insecure_channel(server.grpc_address, options=[
            ("grpc.max_receive_message_length", -1)]) as channel:
        reply = _stub(channel)(grpc_client.encode_infer("wide", {"x": x}, None, "", ""),
                               timeout=60)
    out = np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(x.shape)
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
def test_compressed_requests_are_inflated(server, compression):
    x = np.zeros((200, WIDE), np.float32)
    with grpc.insecure_channel(server.grpc_address, compression=compression) as channel:
        reply = _stub(channel)(grpc_client.encode_infer("wide", {"x": x}, None, "", ""),
                               timeout=30)
    assert len(reply.raw_output_contents[0]) == x.nbytes


@pytest.mark.parametrize("body, headers, status, words", [
    (message(b"\xff\xff\xff"), {}, Status.INVALID_ARGUMENT, "not a valid"),
    (struct.pack(">BL", 0, 32 << 20), {}, Status.RESOURCE_EXHAUSTED, "larger than max"),
    (message(gzip.compress(b"\0" * (20 << 20)), compressed=True), {"grpc-encoding": "gzip"},
     Status.RESOURCE_EXHAUSTED, "larger than max"),
    (message(b"x", compressed=True), {}, Status.INTERNAL, "no encoding"),
    (message(b""), {"grpc-encoding": "snappy"}, Status.INTERNAL, "grpc-encoding"),
    (message(b""), {"grpc-timeout": "soon"}, Status.INTERNAL, "grpc-timeout"),
], ids=["not-protobuf", "announced-too-large", "gzip-bomb", "compressed-without-encoding",
        "unknown-encoding", "bad-timeout"])
def test_bad_calls_get_a_status_and_the_connection_goes_on(server, body, headers, status,
                                                          words):
    """Refused by grpc-core (sizes, encodings, headers) or by the servicer (the message)."""
    client = RawH2(server.grpc_address)
    _, _, trailers = client.call(body, grpc_headers(**headers))
    assert trailers["grpc-status"] == str(int(status)), trailers
    assert words in trailers["grpc-message"]
    x = np.zeros((1, 4), np.float32)
    assert client.call(message(_infer_body("good", x)))[2]["grpc-status"] == "0"
    client.close()


def test_an_early_answer_ends_the_call_and_the_connection_goes_on(server):
    client = RawH2(server.grpc_address)
    stream = client.new_stream()
    client.send_headers(stream, grpc_headers())
    client.send_data(stream, struct.pack(">BL", 0, 32 << 20) + b"\0" * 100, end_stream=False)
    kind, flags, _, payload = client.until(wire.HEADERS, stream)
    assert flags & wire.END_STREAM
    assert payload["grpc-status"] == str(
        int(Status.RESOURCE_EXHAUSTED))
    x = np.zeros((1, 4), np.float32)
    assert client.call(message(_infer_body("good", x)))[2]["grpc-status"] == "0"
    client.close()


def test_a_request_that_is_not_grpc_is_refused(server):
    client = RawH2(server.grpc_address)
    get = [(":method", "GET"), (":scheme", "http"), (":path", PATH), (":authority", "t")]
    with pytest.raises(AssertionError, match="stream reset"):
        client.call(message(b""), get)
    x = np.zeros((1, 4), np.float32)
    assert client.call(message(_infer_body("good", x)))[2]["grpc-status"] == "0"
    client.close()


def test_unknown_methods_are_unimplemented(server):
    with grpc.insecure_channel(server.grpc_address) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/Nope")
        with pytest.raises(grpc.RpcError) as caught:
            call(b"", timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_a_deadline_ends_the_call_and_the_server_goes_on(server):
    request = protos.ModelInferRequest(model_name="heavy")  # seconds of matrix products
    request.inputs.add(name="x", datatype="FP32", shape=[8000, 512])
    request.raw_input_contents.append(np.ones((8000, 512), np.float32).tobytes())
    with grpc.insecure_channel(server.grpc_address) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            _stub(channel)(request, timeout=0.2)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _good_call(server)


# -- the connection itself --------------------------------------------------------------------


def test_pings_are_answered_with_their_payload(server):
    client = RawH2(server.grpc_address)
    client.send(wire.PING, 0, 0, b"12345678")
    kind, flags, _, payload = client.until(wire.PING)
    assert flags & wire.ACK and payload == b"12345678"
    client.close()


def test_a_connection_that_is_not_http2_is_closed(server):
    client = RawH2(server.grpc_address, preface=False)
    client.sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    assert client.goaway_code() in (None, wire.PROTOCOL_ERROR)
    client.close()
    _good_call(server)


def test_a_silent_connection_is_closed_after_the_header_timeout(server):
    client = RawH2(server.grpc_address, preface=False)
    started = time.monotonic()
    while client.read() is not None:  # the server's SETTINGS, then the close
        pass
    assert time.monotonic() - started < 15
    client.close()


def _headers_frame(client: RawH2, stream_id: int, flags: int = wire.END_HEADERS) -> bytes:
    return wire.frame(wire.HEADERS, flags, stream_id, client.encoder.encode(grpc_headers()))


@pytest.mark.parametrize("violation, code", [
    (lambda c: wire.frame(wire.DATA, 0, 1, b"x"), wire.PROTOCOL_ERROR),
    (lambda c: struct.pack(">HBBBL", 0x4000, 0, 0, 0, 1), wire.FRAME_SIZE_ERROR),
    (lambda c: _headers_frame(c, 2), wire.PROTOCOL_ERROR),
    (lambda c: wire.frame(wire.CONTINUATION, wire.END_HEADERS, 1, b"\x82"),
     wire.PROTOCOL_ERROR),
    (lambda c: _headers_frame(c, 1, 0) + b"".join(
        wire.frame(wire.CONTINUATION, 0, 1, b"\x00" * 16000) for _ in range(8)),
     wire.COMPRESSION_ERROR),
    (lambda c: wire.frame(wire.HEADERS, wire.END_HEADERS, 1, b"\xff\xff\xff\xff"),
     wire.COMPRESSION_ERROR),
    (lambda c: wire.frame(wire.SETTINGS, 0, 0, struct.pack(">HL", 4, 1 << 31)),
     wire.FLOW_CONTROL_ERROR),
    (lambda c: wire.frame(wire.SETTINGS, 0, 0, b"\0" * 5), wire.FRAME_SIZE_ERROR),
    (lambda c: wire.frame(wire.WINDOW_UPDATE, 0, 0, b"\0\0\0\0"), wire.PROTOCOL_ERROR),
    (lambda c: wire.frame(wire.DATA, 0, 0, b"x"), wire.PROTOCOL_ERROR),
    (lambda c: wire.frame(wire.PING, 0, 0, b"short"), wire.FRAME_SIZE_ERROR),
], ids=["data-on-idle-stream", "frame-too-large", "even-stream", "stray-continuation",
        "header-block-too-large", "bad-hpack", "window-too-large", "settings-size",
        "zero-window-update", "data-on-stream-0", "short-ping"])
def test_protocol_violations_never_harm_the_server(server, violation, code):
    """grpc-core ends the connection (GOAWAY or a close) or the stream, or ignores what is
    harmless; the server answers the next client either way."""
    client = RawH2(server.grpc_address, timeout_s=3)
    with contextlib.suppress(OSError):  # closed already, or kept open: both fine
        client.sock.sendall(violation(client))
        assert client.goaway_code() in (None, code, wire.PROTOCOL_ERROR)
    client.close()
    _good_call(server)


def test_streams_over_the_limit_are_refused(server):
    client = RawH2(server.grpc_address)
    limit = MAX_CONCURRENT_STREAMS
    for _ in range(limit + 1):  # open, never ended
        client.send_headers(client.new_stream(), grpc_headers())
    kind, _, stream_id, payload = client.until(wire.RST_STREAM)
    assert stream_id == 2 * limit + 1
    assert struct.unpack(">L", payload)[0] in (wire.REFUSED_STREAM, ENHANCE_YOUR_CALM)
    client.close()


def test_streams_reset_by_the_client_are_let_go(server):
    client = RawH2(server.grpc_address)
    x = np.zeros((1, 4), np.float32)
    body = message(_infer_body("good", x))
    for _ in range(3 * MAX_CONCURRENT_STREAMS):
        stream = client.new_stream()
        client.send_headers(stream, grpc_headers())
        client.send(wire.DATA, wire.END_STREAM, stream, body)
        client.send(wire.RST_STREAM, 0, stream, struct.pack(">L", wire.CANCEL))
    # a reset stream counts until its call has stopped, as a client retrying a refused
    # stream finds: soon none is left counted
    for _ in range(100):
        try:
            assert client.call(body)[2]["grpc-status"] == "0"
            break
        except AssertionError as refused:
            assert str(refused) in (f"stream reset: {wire.REFUSED_STREAM}",
                                    f"stream reset: {ENHANCE_YOUR_CALM}")
            time.sleep(0.05)
    else:
        raise AssertionError("streams reset by the client stayed counted")
    client.close()


def test_shutdown_sends_goaway_and_finishes_open_calls(tmp_path):
    root = hostile.good_repository(tmp_path / "repo")
    with running_server(root) as running:
        client = RawH2(running.grpc_address)
        stream = client.new_stream()
        client.send_headers(stream, grpc_headers())  # a call still sending when stop comes
        client.until(wire.SETTINGS)
        x = np.zeros((1, 4), np.float32)
        # grpc-core cancels at shutdown the calls its server has not yet handed to a handler;
        # calls are handed over in the order they came, so once a later call is answered the
        # open one is a handler's, which the grace period lets finish
        assert client.call(message(_infer_body("good", x)))[2]["grpc-status"] == "0"
        running.stop()
        assert client.goaway_code() == wire.NO_ERROR
        client.send(wire.DATA, wire.END_STREAM, stream, message(_infer_body("good", x)))
        trailers = None
        while trailers is None:
            kind, flags, sid, payload = client.until(wire.HEADERS, stream)
            if flags & wire.END_STREAM:
                trailers = payload
        assert trailers["grpc-status"] == "0"
        client.close()


def test_random_frames_never_take_the_server_down(server):
    rng = random.Random(1234)
    kinds = list(range(11))
    for _ in range(60):
        client = RawH2(server.grpc_address)
        frames = []
        for _ in range(rng.randint(1, 6)):
            payload = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 4, 5, 8, 30])))
            frames.append(wire.frame(rng.choice(kinds), rng.getrandbits(8),
                                      rng.choice([0, 1, 2, 3, 2**31 - 1]), payload))
        try:
            client.sock.sendall(b"".join(frames))
            client.sock.settimeout(2)
            while client.read() is not None:
                pass
        except OSError:  # the server closed, or kept it open: either way it is not down
            pass
        client.close()
    _good_call(server)


def _windows(client: RawH2) -> tuple[int, int]:
    """The stream window the server's first SETTINGS announces and its connection window
    once the WINDOW_UPDATE that follows is in (each frame acknowledged as it comes)."""
    got = client.until(wire.SETTINGS)
    pairs = dict(struct.unpack(">HL", got[3][i:i + 6]) for i in range(0, len(got[3]), 6))
    client.send(wire.SETTINGS, wire.ACK, 0)
    update = client.until(wire.WINDOW_UPDATE, 0)
    return pairs.get(wire.SETTINGS_INITIAL_WINDOW_SIZE, 65535), 65535 + struct.unpack(">L", update[3])[0]


def test_the_receive_window_is_each_streams_and_the_connections(server, mlp_file):
    """--grpc-receive-window-bytes is what the server's SETTINGS give each stream before its
    message is read, and its first WINDOW_UPDATE the connection (64 KiB by default; no
    bandwidth probing grows them later)."""
    default = RawH2(server.grpc_address)
    assert _windows(default)[0] == 64 * 1024
    default.close()
    with running_server(mlp_file, grpc_receive_window_bytes=4 << 20) as wide:
        client = RawH2(wide.grpc_address)
        assert _windows(client) == (4 << 20, 4 << 20)
        client.close()
