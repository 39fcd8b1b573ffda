"""Hostile requests: each gets a clear 4xx (gRPC: INVALID_ARGUMENT and friends) naming the
field, never a 500, a traceback, a stalled event loop or a leaked file; the server stays
alive and ready. The server runs where ``etc/secret`` lies; no response may carry it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import statistics
import threading
import time

import grpc
import httpx
import numpy as np
import pytest

from flowserve.protocol import protos

from . import hostile
from .conftest import running_server
from .hostile import leaked

X = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
HEADER_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    jail = tmp_path_factory.mktemp("jail")
    hostile.plant_secret(jail)
    repo = hostile.request_repository(jail / "repo")
    with hostile.working_directory(jail), running_server(
            repo, header_timeout_s=HEADER_TIMEOUT_S, max_json_elements=200_000,
            max_bytes_elements=1000, auth_token=None) as running:
        yield running


@pytest.fixture(scope="module")
def answers():
    """Every response body the tests saw; checked for the secret at the end."""
    seen: list[bytes] = []
    yield seen
    assert seen and not any(leaked(body) for body in seen)


def _post(server, answers, path, content=b"", headers=None, **kwargs):
    answer = httpx.post(f"{server.http_url}{path}", content=content, headers=headers,
                        timeout=60, **kwargs)
    answers.append(answer.content)
    return answer


def _binary(header: dict, blob: bytes) -> tuple[bytes, dict]:
    text = json.dumps(header).encode()
    return text + blob, {"Inference-Header-Content-Length": str(len(text))}


DEEP = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize("body, headers, words", [
    (json.dumps({"inputs": [{**X, "shape": [0, 10**21], "data": []}]}), None, "shape"),
    (json.dumps({"inputs": [{**X, "shape": [1] * 65, "data": [1]}]}), None, "65 dims"),
    ('{"inputs": [%s], "parameters": {"timeout": 1%s}}' % (json.dumps(X), "0" * 400), None,
     "parameters.timeout"),
    (json.dumps({"inputs": [X]}), {"Inference-Header-Content-Length": b"\xb2"},
     "Inference-Header-Content-Length"),
    (json.dumps({"inputs": [X]}), {"Inference-Header-Content-Length": "9" * 5000},
     "Inference-Header-Content-Length"),
    (DEEP, None, "nested too deeply"),
    (json.dumps({"inputs": [X], "parameters": {"binary_data_output": "false"}}), None,
     "binary_data_output: expected true or false"),
    (json.dumps({"inputs": [X], "outputs": [{"name": "y", "parameters": {"binary_data": 1}}]}),
     None, "binary_data: expected true or false"),
])
def test_malformed_requests_get_400_naming_the_field(server, answers, body, headers, words):
    answer = _post(server, answers, "/v2/models/good/infer", body, headers)
    assert answer.status_code == 400, answer.text
    assert words in answer.json()["error"]
    hostile.assert_alive(server.http_url)


def test_deep_json_to_any_route_is_a_400(server, answers):
    for path in ("/v2/repository/index", "/v2/repository/models/good/load"):
        answer = _post(server, answers, path, DEEP)
        assert answer.status_code in (400, 403) and "error" in answer.json(), answer.text
    answer = _post(server, answers, "/v2/repository/index", DEEP)
    assert answer.status_code == 400 and "nested too deeply" in answer.json()["error"]


def test_bytes_and_json_sizes_are_refused_before_they_are_built(server, answers):
    blob = b"".join(len(b"a").to_bytes(4, "little") + b"a" for _ in range(2000))
    body, headers = _binary({"inputs": [{"name": "text", "shape": [1000, 2], "datatype": "BYTES",
                                         "parameters": {"binary_data_size": len(blob)}}]}, blob)
    answer = _post(server, answers, "/v2/models/text/infer", body, headers)
    assert answer.status_code == 400 and "2000 BYTES elements exceed" in answer.json()["error"]
    strings = json.dumps({"inputs": [{"name": "text", "shape": [1500, 2], "datatype": "BYTES",
                                      "data": ["a"] * 3000}]})
    answer = _post(server, answers, "/v2/models/text/infer", strings)
    assert answer.status_code in (400, 413) and "BYTES elements" in answer.json()["error"]
    numbers = json.dumps({"inputs": [{**X, "shape": [1, 300_000], "data": [0] * 300_000}]})
    answer = _post(server, answers, "/v2/models/good/infer", numbers)
    assert answer.status_code == 413 and "--max-json-elements" in answer.json()["error"]
    hostile.assert_alive(server.http_url)


def test_non_utf8_bytes_reach_a_string_model_and_come_back(server, answers):
    items = [b"\xff\xfe raw", "é ok".encode(), b"\x80", b""]
    blob = b"".join(len(item).to_bytes(4, "little") + item for item in items)
    body, headers = _binary({"inputs": [{"name": "text", "shape": [2, 2], "datatype": "BYTES",
                                         "parameters": {"binary_data_size": len(blob)}}],
                             "parameters": {"binary_data_output": True}}, blob)
    answer = _post(server, answers, "/v2/models/text/infer", body, headers)
    assert answer.status_code == 200, answer.text
    length = int(answer.headers["inference-header-content-length"])
    assert answer.content[length:] == blob
    with grpc.insecure_channel(server.grpc_address) as channel:
        request = protos.ModelInferRequest(model_name="text")
        tensor = request.inputs.add(name="text", datatype="BYTES", shape=[2, 2])
        tensor.contents.bytes_contents.extend(items)
        reply = _grpc_call(channel, "ModelInfer", request)
    assert reply.raw_output_contents[0] == blob


def test_request_ids_are_returned(server, answers):
    answer = _post(server, answers, "/v2/models/good/infer", json.dumps({"id": "q-7", "inputs": [X]}))
    assert answer.json()["id"] == "q-7"
    answer = _post(server, answers, "/v2/models/good/infer", json.dumps({"inputs": [X]}))
    assert answer.json()["id"]  # made up, as MLServer does


def test_the_http_infer_route_has_one_path():
    from flowserve.server.dataplane import DataPlane
    from flowserve.server.http.app import build_http_app
    from flowserve.server.settings import ServerSettings

    front = build_http_app(DataPlane(ServerSettings(model_path="unused")))

    async def post_behind_the_front_door():  # FastAPI alone
        transport = httpx.ASGITransport(app=front.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return await client.post("/v2/models/good/infer", json={"inputs": [X]})

    assert asyncio.run(post_behind_the_front_door()).status_code in (404, 405)
    assert "/v2/models/{model_name}/infer" in front.app.openapi()["paths"]
    other = build_http_app(DataPlane(ServerSettings(model_path="unused")))
    assert front.plans is not other.plans  # each app keeps its own parsed headers


# -- gRPC ---------------------------------------------------------------------------------


def _grpc_call(channel, method, request):
    request_cls, response_cls, _ = protos.METHODS[method]
    call = channel.unary_unary(f"/{protos.SERVICE_NAME}/{method}",
                               request_serializer=request_cls.SerializeToString,
                               response_deserializer=response_cls.FromString)
    return call(request, timeout=30)


def _int8_request(values, shape=(1, 3), **fields):
    request = protos.ModelInferRequest(model_name="int8", **fields)
    tensor = request.inputs.add(name="x", datatype="INT8", shape=list(shape))
    tensor.contents.int_contents.extend(values)
    return request


@pytest.mark.parametrize("request_factory, words", [
    (lambda: _int8_request([1000, -200, 300]), "outside the range of INT8"),
    (lambda: _int8_request([1], shape=[1] * 65), "65 dims"),
    (lambda: _int8_request([1], shape=[0, 2**40]), "shape"),
])
def test_grpc_bad_requests_are_invalid_argument(server, answers, request_factory, words):
    with grpc.insecure_channel(server.grpc_address) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            _grpc_call(channel, "ModelInfer", request_factory())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in caught.value.details()
    answers.append(caught.value.details().encode())


def test_grpc_timeout_parameter_must_be_an_integer(server, answers):
    request = _int8_request([1, 2, 3])
    request.parameters["timeout"].string_param = "soon"
    with grpc.insecure_channel(server.grpc_address) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            _grpc_call(channel, "ModelInfer", request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "parameters.timeout" in caught.value.details()


def test_each_bad_stream_message_gets_its_own_error_and_the_stream_goes_on(server, answers):
    messages = [_int8_request([1, 2, 3], id="a"), _int8_request([1000, 0, 0], id="b"),
                protos.ModelInferRequest(model_name="nope", id="c"), _int8_request([4, 5, 6], id="d")]
    request_cls, response_cls, _ = protos.METHODS["ModelStreamInfer"]
    with grpc.insecure_channel(server.grpc_address) as channel:
        stream = channel.stream_stream(f"/{protos.SERVICE_NAME}/ModelStreamInfer",
                                       request_serializer=request_cls.SerializeToString,
                                       response_deserializer=response_cls.FromString)
        replies = list(stream(iter(messages), timeout=30))
    assert [r.infer_response.id for r in replies] == ["a", "b", "c", "d"]
    assert [bool(r.error_message) for r in replies] == [False, True, True, False]
    assert "outside the range of INT8" in replies[1].error_message
    assert "unknown model 'nope'" in replies[2].error_message
    assert np.frombuffer(replies[3].infer_response.raw_output_contents[0], np.int8).tolist() == [4, 5, 6]
    answers.extend(r.SerializeToString() for r in replies)


def test_an_unexpected_failure_is_internal_without_python_internals(server, answers, monkeypatch):
    async def broken(request):
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr(server.plane, "infer", broken)
    with grpc.insecure_channel(server.grpc_address) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            _grpc_call(channel, "ModelInfer", _int8_request([1, 2, 3]))
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert caught.value.details() == "internal error"
    answer = _post(server, answers, "/v2/models/good/infer", json.dumps({"inputs": [X]}))
    assert answer.status_code == 500 and answer.json() == {"error": "internal error"}
    monkeypatch.undo()
    hostile.assert_alive(server.http_url)


# -- request heads and the event loop -------------------------------------------------


def _connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.http_port), timeout=30)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _send_oversized_head(sock: socket.socket, total: int = 2 * 2**20, chunk_bytes: int = 16_000,
                         pause_s: float = 0.0) -> bytes:
    """Send a head of ``total`` bytes (until the server closes); what it answered."""
    with contextlib.suppress(OSError):
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        chunk = b"X-Filler: " + b"a" * chunk_bytes + b"\r\n"
        for _ in range(total // len(chunk)):
            sock.sendall(chunk)
            time.sleep(pause_s)
    return _read_all(sock)


def test_an_oversized_head_gets_431_and_the_connection_closes(server, answers):
    with _connect(server) as sock:
        reply = _send_oversized_head(sock)
    answers.append(reply)
    assert reply.startswith(b"HTTP/1.1 431 ") and b"--max-header-bytes" in reply
    hostile.assert_alive(server.http_url)


@pytest.mark.parametrize("sent", [b"", b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: "])
def test_a_head_not_sent_in_time_gets_408_and_the_connection_closes(server, answers, sent):
    with _connect(server) as sock:
        sock.sendall(sent)
        started = time.monotonic()
        reply = _read_all(sock)  # returns when the server closes
        waited = time.monotonic() - started
    answers.append(reply)
    if sent:
        assert reply.startswith(b"HTTP/1.1 408 ") and b"--header-timeout" in reply
    else:
        assert reply == b""  # a connection that never spoke is closed quietly
    assert HEADER_TIMEOUT_S * 0.9 <= waited < 20
    hostile.assert_alive(server.http_url)


def test_an_idle_keep_alive_connection_is_not_cut_by_the_head_timeout(server):
    request = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(server) as sock:
        for _ in range(2):
            sock.sendall(request)
            reply = b""
            while not reply.endswith(b'{"live":true}'):
                reply += sock.recv(65536)
            assert reply.startswith(b"HTTP/1.1 200 ")
            time.sleep(HEADER_TIMEOUT_S * 1.5)


def _probe_latencies(url: str, busy: threading.Event, count: int = 7) -> list[float]:
    """Latencies of health/live probes taken while ``busy`` is set (fresh connections)."""
    latencies = []
    with httpx.Client(base_url=url, timeout=30) as client:
        while busy.is_set() and len(latencies) < count:
            started = time.perf_counter()
            assert client.get("/v2/health/live").status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(0.03)
    return latencies


def _in_background(work) -> tuple[threading.Thread, threading.Event]:
    busy = threading.Event()
    busy.set()

    def run():
        try:
            work()
        finally:
            busy.clear()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, busy


def _heavy_body(rows: int) -> tuple[bytes, dict]:
    x = np.ones((rows, 512), np.float32)
    return _binary({"inputs": [{"name": "x", "shape": [rows, 512], "datatype": "FP32",
                                "parameters": {"binary_data_size": x.nbytes}}]}, x.tobytes())


def test_health_answers_within_100ms_while_a_heavy_request_runs(server, answers):
    light, light_headers = _heavy_body(1)
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        for _ in range(60):  # the model looks cheap: its average batch takes well under 1 ms
            client.post("/v2/models/heavy/infer", content=light, headers=light_headers)
    body, headers = _heavy_body(16_384)
    results, probing = [], threading.Event()
    probing.set()

    def heavy_until_probed():  # heavy requests back to back, so every probe meets one
        while probing.is_set() and len(results) < 50:
            results.append(_post(server, answers, "/v2/models/heavy/infer", body, headers))

    thread, busy = _in_background(heavy_until_probed)
    time.sleep(0.3)  # the first body is on its way or being computed
    latencies = _probe_latencies(server.http_url, busy)
    probing.clear()
    thread.join(120)
    assert results and all(r.status_code == 200 for r in results), results
    assert len(latencies) >= 3, f"the heavy requests ended too soon to probe: {latencies}"
    assert statistics.median(latencies) < 0.1, latencies


def test_health_answers_within_100ms_while_20_oversized_heads_are_sent(server, answers):
    replies = []

    def flood():
        sockets = [_connect(server) for _ in range(20)]
        threads = [threading.Thread(target=lambda s=s: replies.append(  # ~0.3 s to the cap
            _send_oversized_head(s, chunk_bytes=4000, pause_s=0.02))) for s in sockets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for sock in sockets:
            sock.close()

    thread, busy = _in_background(flood)
    latencies = _probe_latencies(server.http_url, busy)
    thread.join(60)
    answers.extend(replies)
    assert len(replies) == 20 and all(r.startswith(b"HTTP/1.1 431 ") for r in replies)
    assert latencies and statistics.median(latencies) < 0.1, latencies
    hostile.assert_alive(server.http_url)


# -- statistics, tokens ------------------------------------------------------------------


def test_statistics_pass_perf_analyzers_consistency_rule(server, answers):
    for _ in range(3):
        _post(server, answers, "/v2/models/good/infer", json.dumps({"inputs": [X]}))
    stats = httpx.get(f"{server.http_url}/v2/models/stats").json()["model_stats"]
    for model in stats:
        inference = model["inference_stats"]
        counts = {inference[k]["count"] for k in ("compute_input", "compute_infer",
                                                  "compute_output")}
        assert counts == {model["execution_count"]}, model
        for batch in model["batch_stats"]:
            assert len({batch[k]["count"] for k in ("compute_input", "compute_infer",
                                                    "compute_output")}) == 1, batch
    good = next(m for m in stats if m["name"] == "good")
    assert good["execution_count"] >= 3 and good["inference_stats"]["compute_input"]["ns"] >= 0


def test_a_token_is_checked_on_every_route_but_health(tmp_path):
    repo = hostile.good_repository(tmp_path / "repo")
    with running_server(repo, auth_token="s3cr3t-token") as token_server:
        url = token_server.http_url
        for token in (None, "wrong", "s3cr3t-token-and-more", "s3cr3t-toke"):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            answer = httpx.post(f"{url}/v2/models/good/infer", json={"inputs": [X]},
                                headers=headers)
            assert answer.status_code == 401, token
        answer = httpx.post(f"{url}/v2/models/good/infer", json={"inputs": [X]},
                            headers={"Authorization": "Bearer s3cr3t-token"})
        assert answer.status_code == 200
        assert httpx.get(f"{url}/v2/health/ready").status_code == 200
