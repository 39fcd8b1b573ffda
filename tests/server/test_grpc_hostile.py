"""Hostile gRPC clients (issue 25, defects 1-8): what one client can make the server hold or
wait for is bounded, and other clients go on being served. Each test failed against the
hand-written HTTP/2 server that grpcio's replaced; the heavier versions, with RSS and an
honest client's latency, are in ``bench/bench_hostile.py``."""

from __future__ import annotations

import gzip
import statistics
import struct
import threading
import time

import grpc
import numpy as np
import pytest
from onnx import TensorProto

from flowserve.clients import grpc_client
from flowserve.protocol import protos
from flowserve.clients import http2_wire as wire

from . import hostile
from .conftest import running_server
from .h2client import RawH2, grpc_headers, message, send_half

WIDE = 4096  # columns of the FP32 identity model "wide"
ENHANCE_YOUR_CALM = 0xB
DEADLINE_EXCEEDED = str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = hostile.request_repository(tmp_path_factory.mktemp("hostile-grpc") / "repo")
    hostile.write_model(root / "wide" / "1",
                        hostile.identity_model("x", "y", TensorProto.FLOAT, WIDE))
    (root / "wide" / "config.json").write_text('{"max_batch_size": 0}')
    with running_server(root, header_timeout_s=1.0, grpc_message_timeout_s=1.0,
                        max_request_bytes=16 << 20, grpc_compression="gzip") as running:
        yield running


def _method(channel, name: str):
    request_cls, response_cls, streaming = protos.METHODS[name]
    kind = channel.stream_stream if streaming else channel.unary_unary
    return kind(f"/{protos.SERVICE_NAME}/{name}", request_serializer=request_cls.SerializeToString,
                response_deserializer=response_cls.FromString)


def _good_call(server) -> None:
    """The server answers a fresh client correctly, in time."""
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    with grpc.insecure_channel(server.grpc_address) as channel:
        reply = _method(channel, "ModelInfer")(
            grpc_client.encode_infer("good", {"x": x}, None, "", ""), timeout=10)
    assert reply.model_name == "good" and len(reply.raw_output_contents) == 1


def _outcome(client: RawH2, limit_s: float):
    """What the server did to the connection within ``limit_s``: ("goaway", code),
    ("reset", code), ("trailers", headers), ("closed", None) or ("open", None)."""
    client.sock.settimeout(limit_s)
    try:
        while (got := client.read()) is not None:
            kind, flags, _, payload = got
            if kind == wire.GOAWAY:
                return "goaway", struct.unpack(">L", payload[4:8])[0]
            if kind == wire.RST_STREAM:
                return "reset", struct.unpack(">L", payload)[0]
            if kind == wire.HEADERS and flags & wire.END_STREAM:
                return "trailers", payload
            if kind == wire.SETTINGS and not flags & wire.ACK:
                client.send(wire.SETTINGS, wire.ACK, 0)
        return "closed", None
    except TimeoutError:
        return "open", None
    except OSError:
        return "closed", None


# -- 1. streaming without backpressure ---------------------------------------------------------


def test_a_stream_whose_answers_are_not_read_is_not_read_either(server):
    """A ModelStreamInfer client that sends 1,000 requests of 64 KiB (64 MB) and never reads
    an answer: the server stops reading once a bounded number is in flight (plus what
    grpc-core's flow-control window lets in), so the client's sends wait (the old server
    took all 64 MB and queued every answer)."""
    x = np.ones((4, WIDE), np.float32)
    request = grpc_client.encode_infer("wide", {"x": x}, None, "", "")
    sent, stop = [0], threading.Event()

    def requests():
        for _ in range(1000):
            if stop.is_set():
                return
            sent[0] += 1
            yield request

    with grpc.insecure_channel(server.grpc_address) as channel:
        call = _method(channel, "ModelStreamInfer")(requests(), timeout=30)
        time.sleep(3)  # the answers are never read
        taken = sent[0]
        stop.set()
        call.cancel()
    assert taken < 300, f"the server read {taken} requests of a stream it could not answer"
    _good_call(server)


def test_a_stream_whose_answers_wait_past_the_message_timeout_is_ended(server):
    """Answers that wait for the client's window longer than --grpc-message-timeout (1 s
    here) end the stream: DEADLINE_EXCEEDED once the client reads again."""
    x = np.ones((4, WIDE), np.float32)
    request = grpc_client.encode_infer("wide", {"x": x}, None, "", "")
    with grpc.insecure_channel(server.grpc_address) as channel:
        answers = _method(channel, "ModelStreamInfer")(iter([request] * 100), timeout=30)
        time.sleep(4)  # not reading: the server's writes wait
        with pytest.raises(grpc.RpcError) as caught:
            for _ in answers:
                pass
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "--grpc-message-timeout" in caught.value.details()


def test_a_stream_is_answered_in_order_with_errors_in_place(server):
    x = np.arange(4 * WIDE, dtype=np.float32).reshape(4, WIDE)
    requests = [grpc_client.encode_infer("nope" if index % 2 else "wide", {"x": x}, None,
                                         "", str(index)) for index in range(40)]
    with grpc.insecure_channel(server.grpc_address) as channel:
        answers = list(_method(channel, "ModelStreamInfer")(iter(requests), timeout=60))
    assert [a.infer_response.id for a in answers] == [str(i) for i in range(40)]
    assert all(("unknown model" in a.error_message) == (i % 2 == 1) for i, a in enumerate(answers))
    out = np.frombuffer(answers[0].infer_response.raw_output_contents[0], np.float32)
    np.testing.assert_array_equal(out, x.ravel())


# -- 2. compression bombs, and what an answer echoes -----------------------------------------


def test_a_compressed_stream_message_with_huge_names_gets_a_short_answer(server):
    """4 MB of id and a 1 MB model name, gzip-compressed to a few kB: the error answer holds
    at most a kilobyte of each (the old server echoed them whole, 1,000x what was sent)."""
    request = protos.ModelInferRequest(model_name="m" * (1 << 20), id="i" * (4 << 20))
    with grpc.insecure_channel(server.grpc_address, compression=grpc.Compression.Gzip) as channel:
        answers = list(_method(channel, "ModelStreamInfer")(iter([request] * 3), timeout=30))
    assert len(answers) == 3
    for answer in answers:
        assert "unknown model" in answer.error_message and len(answer.error_message) < 1024
        assert answer.ByteSize() < 4096


def test_a_message_inflating_past_the_limit_is_resource_exhausted(server):
    client = RawH2(server.grpc_address)
    bomb = message(gzip.compress(b"\0" * (20 << 20)), compressed=True)
    _, _, trailers = client.call(bomb, grpc_headers(**{"grpc-encoding": "gzip"}))
    assert trailers["grpc-status"] == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
    client.close()


# -- 3. floods; reset streams' work ------------------------------------------------------------


def test_a_ping_flood_is_cut_off_and_others_are_served(server):
    client = RawH2(server.grpc_address)
    client.sock.sendall(wire.frame(wire.PING, 0, 0, b"12345678") * 1000)
    assert _outcome(client, 10) == ("goaway", ENHANCE_YOUR_CALM)
    client.close()
    _good_call(server)


def test_a_rapid_reset_flood_leaves_other_clients_served(server):
    client = RawH2(server.grpc_address)
    body = message(grpc_client.encode_infer("good", {"x": np.zeros((1, 4), np.float32)},
                                            None, "", "").SerializeToString())
    frames = []
    for index in range(5000):
        stream = 2 * index + 1
        frames.append(wire.frame(wire.HEADERS, wire.END_HEADERS, stream,
                                 client.encoder.encode(grpc_headers())))
        frames.append(wire.frame(wire.DATA, wire.END_STREAM, stream, body))
        frames.append(wire.frame(wire.RST_STREAM, 0, stream, struct.pack(">L", wire.CANCEL)))
    flood = threading.Thread(target=lambda: _quietly(client.sock.sendall, b"".join(frames)))
    flood.start()
    for _ in range(10):
        _good_call(server)
    flood.join(30)
    client.close()


def _quietly(send, data: bytes) -> None:
    try:
        send(data)
    except OSError:  # cut off: as good
        pass


def test_work_of_calls_that_went_away_is_dropped_from_the_queue(server):
    """Calls queued behind a long one whose clients give up (here: cancel, a reset stream)
    never run: the model's execution count grows by the long call only."""
    heavy = protos.ModelInferRequest(model_name="heavy")  # seconds of matrix products
    heavy.inputs.add(name="x", datatype="FP32", shape=[8000, 512])
    heavy.raw_input_contents.append(np.ones((8000, 512), np.float32).tobytes())
    light = protos.ModelInferRequest(model_name="heavy")
    light.inputs.add(name="x", datatype="FP32", shape=[1, 512])
    light.raw_input_contents.append(np.ones((1, 512), np.float32).tobytes())
    with grpc.insecure_channel(server.grpc_address) as channel:
        infer, stats = _method(channel, "ModelInfer"), _method(channel, "ModelStatistics")
        before = _executions(stats)
        running = infer.future(heavy, timeout=120)
        time.sleep(0.15)  # the long call runs; the next ones wait in the queue
        gone = [infer.future(light, timeout=60) for _ in range(5)]
        time.sleep(0.05)
        for call in gone:
            call.cancel()
        running.result()
        time.sleep(0.5)
        assert _executions(stats) == before + 1


def _executions(stats) -> int:
    reply = stats(protos.ModelStatisticsRequest(name="heavy"), timeout=10)
    return sum(model.execution_count for model in reply.model_stats)


# -- 4. CONTINUATION flood, 5. stalls ----------------------------------------------------------


def test_a_continuation_flood_is_cut_off(server):
    client = RawH2(server.grpc_address)
    block = client.encoder.encode(grpc_headers())
    flood = wire.frame(wire.HEADERS, 0, 1, block) + wire.frame(wire.CONTINUATION, 0, 1) * 200_000
    _quietly(client.sock.sendall, flood)
    kind, _ = _outcome(client, 10)
    assert kind in ("goaway", "reset", "closed")
    client.close()
    _good_call(server)


def test_a_half_sent_message_is_answered_deadline_exceeded(server):
    """A unary call whose message stops half-way holds its bytes no longer than
    --grpc-message-timeout (1 s here; the old server held it for ever)."""
    client = RawH2(server.grpc_address)
    client.send_headers(1, grpc_headers())
    client.send_data(1, struct.pack(">BL", 0, 60_000) + b"\0" * 1000, end_stream=False)
    kind, trailers = _outcome(client, 10)
    assert kind == "trailers" and trailers["grpc-status"] == DEADLINE_EXCEEDED
    assert "--grpc-message-timeout" in trailers["grpc-message"]
    client.close()


def test_a_call_without_a_message_is_refused_at_once(server):
    with grpc.insecure_channel(server.grpc_address) as channel:
        call = channel.stream_unary(f"/{protos.SERVICE_NAME}/ModelInfer")
        with pytest.raises(grpc.RpcError) as caught:
            call(iter([]), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "none came" in caught.value.details()


# -- 7. deadlines, 8. names and tokens --------------------------------------------------------


def test_a_zero_grpc_timeout_is_deadline_exceeded(server):
    client = RawH2(server.grpc_address)
    body = message(protos.ServerLiveRequest().SerializeToString())
    path = f"/{protos.SERVICE_NAME}/ServerLive"
    _, _, trailers = client.call(body, grpc_headers(path, **{"grpc-timeout": "0n"}))
    assert trailers["grpc-status"] == DEADLINE_EXCEEDED
    client.close()


@pytest.mark.parametrize("method, request_", [
    ("ModelMetadata", protos.ModelMetadataRequest(name="m" * (1 << 20))),
    ("ModelInfer", protos.ModelInferRequest(model_name="m" * (1 << 20))),
    ("ModelReady", protos.ModelReadyRequest(name="m", version="v" * (1 << 20))),
])
def test_a_huge_model_name_gets_a_short_error(server, method, request_):
    with grpc.insecure_channel(server.grpc_address) as channel:
        try:
            _method(channel, method)(request_, timeout=10)
        except grpc.RpcError as error:
            assert len(error.details()) < 1024 and "characters" in error.details()
            return
    assert method == "ModelReady"  # answers false: nothing echoed


def test_a_models_health_needs_the_token(mlp_file):
    health = pytest.importorskip("grpc_health.v1.health_pb2")
    with running_server(mlp_file, auth_token="s3cret") as secured:
        with grpc.insecure_channel(secured.grpc_address) as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                        request_serializer=health.HealthCheckRequest.SerializeToString,
                                        response_deserializer=health.HealthCheckResponse.FromString)
            for name in ("tiny", "nope"):
                with pytest.raises(grpc.RpcError) as caught:
                    check(health.HealthCheckRequest(service=name), timeout=10)
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert check(health.HealthCheckRequest(service=""), timeout=10).status == 1


# -- 9. gzip bombs and half-sent messages (issue 46) -------------------------------------------

MIB = 1 << 20
STALL_S = 1.0  # --grpc-receive-stall-timeout of the guarded server
MESSAGE_TIMEOUT_S = 4.0  # its --grpc-message-timeout


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A server with the defaults that guard it (identity requests only, 64 MiB messages,
    128 MiB of them received at once), its timeouts shortened for the tests."""
    root = hostile.good_repository(tmp_path_factory.mktemp("guarded") / "repo")
    hostile.write_model(root / "sum" / "1", hostile.sum_model())
    (root / "sum" / "config.json").write_text('{"max_batch_size": 0}')
    with running_server(root, grpc_message_timeout_s=MESSAGE_TIMEOUT_S,
                        grpc_receive_stall_timeout_s=STALL_S) as running:
        yield running


def _rss_mb(field: str = "VmRSS") -> float:
    """This process's (and so the in-process server's) resident memory, or its peak."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field}")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # VmHWM back to the current RSS


def _honest(server, stop: threading.Event, latencies: list) -> None:
    """ModelInfer calls of an honest client of ``sum`` (the bombs' model) on its own
    connection until ``stop`` (one at least)."""
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    request = grpc_client.encode_infer("sum", {"x": x}, None, "", "")
    with grpc.insecure_channel(server.grpc_address) as channel:
        infer = _method(channel, "ModelInfer")
        while not latencies or not stop.is_set():
            started = time.perf_counter()
            infer(request, timeout=30)
            latencies.append(time.perf_counter() - started)
            time.sleep(0.02)


def _bomb() -> bytes:
    """A ModelInfer message of 63 MiB of zeros for ``sum``, gzip-compressed to about 64 KB."""
    x = np.zeros((63 * MIB // (4 * WIDE), WIDE), np.float32)
    body = grpc_client.encode_infer("sum", {"x": x}, None, "", "").SerializeToString()
    return message(gzip.compress(body, 6), compressed=True)


def _bombard(server, bomb: bytes, seconds: float, statuses: list) -> None:
    """One connection sending ``bomb`` call after call for ``seconds``; each call's status
    and message, or ("reset", "") when the server reset its stream (refused at its headers,
    the server may reset it before the body is all sent)."""
    client, deadline = RawH2(server.grpc_address, timeout_s=60), time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                _, _, trailers = client.call(bomb, grpc_headers(**{"grpc-encoding": "gzip"}))
            except AssertionError as reset:
                assert "stream reset" in str(reset)
                statuses.append(("reset", ""))
                continue
            statuses.append((trailers["grpc-status"], trailers.get("grpc-message", "")))
    finally:
        client.close()


def test_gzip_bombs_are_refused_unread_so_others_are_served_at_once(guarded):
    """One connection of 64 KB gzip messages that inflate to 63 MiB, back to back for 3 s:
    refused before they are read (UNIMPLEMENTED, the algorithm named), so an honest client
    of the same model keeps a median under 100 ms (when the server inflated and ran them,
    each of its calls waited behind one)."""
    bomb, statuses, latencies, stop = _bomb(), [], [], threading.Event()
    prober = threading.Thread(target=_honest, args=(guarded, stop, latencies))
    prober.start()
    try:
        _bombard(guarded, bomb, 3.0, statuses)
    finally:
        stop.set()
        prober.join(60)
    assert len(latencies) >= 5 and statistics.median(latencies) <= 0.1, latencies
    refused = [text for code, text in statuses if code == str(grpc.StatusCode.UNIMPLEMENTED.value[0])]
    assert refused and {code for code, _ in statuses} <= {str(grpc.StatusCode.UNIMPLEMENTED.value[0]), "reset"}
    assert "'gzip' is disabled" in refused[0]


def test_compressed_requests_are_refused_by_default_and_the_channel_goes_on(guarded):
    """grpcio's own client, deflate: UNIMPLEMENTED naming the algorithm (--grpc-compression
    gzip accepts it); the same channel's next plain call is answered."""
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    request = grpc_client.encode_infer("good", {"x": x}, None, "", "")
    with grpc.insecure_channel(guarded.grpc_address) as channel:
        infer = _method(channel, "ModelInfer")
        with pytest.raises(grpc.RpcError) as caught:
            infer(request, timeout=10, compression=grpc.Compression.Deflate)
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "'deflate' is disabled" in caught.value.details()
        assert infer(request, timeout=10).model_name == "good"


def test_four_connections_of_gzip_bombs_hold_under_256_mb(guarded):
    bomb, statuses = _bomb(), []
    _good_call(guarded)
    _reset_peak()
    before = _rss_mb()
    attackers = [threading.Thread(target=_bombard, args=(guarded, bomb, 2.0, statuses))
                 for _ in range(4)]
    for attacker in attackers:
        attacker.start()
    for attacker in attackers:
        attacker.join(60)
    assert statuses and _rss_mb("VmHWM") - before <= 256
    _good_call(guarded)


def test_ten_half_sent_messages_hold_under_256_mb_and_are_all_ended(guarded):
    """Ten connections each announce a 48 MiB message and send it as far as the windows
    allow for 3 s, never finishing it: two are let in at once (128 MiB / 64 MiB), the others
    are held to their initial window and wait; while they wait, the ones let in are cut off
    after the stall timeout (RESOURCE_EXHAUSTED), and every call is ended within
    --grpc-message-timeout of its start (the server took all 480 MiB, for 60 s, before)."""
    _good_call(guarded)
    _reset_peak()
    before = _rss_mb()
    clients = [RawH2(guarded.grpc_address) for _ in range(10)]
    outcomes: list = [None] * 10

    def stall(index: int) -> None:
        _, ended = send_half(clients[index], 48 * MIB, 3.0)
        outcomes[index] = ended or _outcome(clients[index], MESSAGE_TIMEOUT_S + 6)[0]


    threads = [threading.Thread(target=stall, args=(i,)) for i in range(10)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    _good_call(guarded)  # served meanwhile, once the stall timeout made room
    for thread in threads:
        thread.join(30)
    took = time.monotonic() - started
    for client in clients:
        client.close()
    assert _rss_mb("VmHWM") - before <= 256
    assert all(outcome in ("trailers", "reset") for outcome in outcomes), outcomes
    assert took <= 3.0 + MESSAGE_TIMEOUT_S + 6
