"""Request bodies cost bounded time and memory: a body that stalls or trickles is answered
408 and closed (``--body-idle-timeout``, ``--body-timeout``); buffers allocated ahead of
their data stay within ``--max-preallocated-body-bytes`` however many heads declare large
bodies (beyond it a body grows as it arrives); an allocation refused with ``MemoryError``
leaves nothing behind (the request is served as its data arrives)."""

from __future__ import annotations

import json
import logging
import select
import socket
import time

import onnx
import pytest

from flowserve.server.http import app as http_app

from .conftest import running_server
from .test_large_bodies import check, doubler, images, read_answer, request


@pytest.fixture(scope="module")
def doubler_repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("bodies")
    (root / "doubler" / "1").mkdir(parents=True)
    onnx.save(doubler(), root / "doubler" / "1" / "model.onnx")
    (root / "doubler" / "config.json").write_text(json.dumps({"max_batch_size": 8}))
    return root


@pytest.fixture(scope="module")
def server(doubler_repo):
    with running_server(doubler_repo, max_request_bytes=1 << 21, body_idle_timeout_s=0.5,
                        body_timeout_s=2.0, max_preallocated_body_bytes=1 << 20,
                        allow_client_shm=True) as running:
        yield running


def connect(server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=8)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def json_head(length: int) -> bytes:
    return (b"POST /v2/models/doubler/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % length)


def closed(sock: socket.socket) -> bool:
    """The server closed the connection after its answer (or reset it)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("kind", ["binary into a sink", "JSON through uvicorn", "FastAPI route"])
def test_a_body_that_stalls_is_answered_408_and_closed(server, kind, caplog):
    """Whatever the route; the request's task ends quietly (nothing logged as an error)."""
    if kind == "binary into a sink":
        head, body = request(images(2, seed=1))
    elif kind == "JSON through uvicorn":
        head, body = json_head(100), b'{"inputs": ['
    else:
        head = (b"POST /v2/systemsharedmemory/region/r/register HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: 60\r\n\r\n")
        body = b'{"key": "/k", "offset": 0, "byte_size": 1}'
    caplog.set_level(logging.WARNING)
    with connect(server) as sock:
        sock.sendall(head + body[:len(body) // 3])
        reader = sock.makefile("rb")
        status, answer = read_answer(reader)
        assert status == 408, answer
        assert "--body-idle-timeout" in answer["error"]
        assert closed(sock)
    time.sleep(0.2)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_body_that_trickles_is_answered_408_at_its_deadline(server):
    """One byte every 0.2 s never trips the idle timeout, but the body's deadline."""
    head, body = request(images(1, seed=2))
    with connect(server) as sock:
        sock.sendall(head)
        for byte in body:  # until the answer comes
            if select.select([sock], [], [], 0.2)[0]:
                break
            sock.sendall(bytes([byte]))
        status, answer = read_answer(sock.makefile("rb"))
        assert status == 408, answer
        assert "--body-timeout" in answer["error"]


def test_a_body_sent_whole_is_served_and_its_connection_kept(server):
    """A body that keeps coming is not timed out, and the connection serves the next."""
    xs = [images(2, seed=3), images(1, seed=4)]
    with connect(server) as sock:
        reader = sock.makefile("rb")
        for x in xs:
            head, body = request(x)
            sock.sendall(head)
            for start in range(0, len(body), 100_000):
                time.sleep(0.1)
                sock.sendall(body[start:start + 100_000])
            status, outputs = read_answer(reader)
            assert status == 200, outputs
            check(outputs, x)


def test_heads_declaring_large_bodies_preallocate_at_most_the_cap(server):
    """Eight heads each declaring ~384 KiB (3 MiB in all) with a cap of 1 MiB: two bodies
    get a buffer ahead of their data, the others grow as they arrive; all are served
    exactly, and nothing stays counted afterwards."""
    budget = server.http_app.body_budget
    xs = [images(3, seed=10 + i) for i in range(8)]
    requests = [request(x) for x in xs]
    size = len(requests[0][1])
    socks = [connect(server) for _ in xs]
    try:
        for sock, (head, _) in zip(socks, requests):
            sock.sendall(head)
        deadline = time.monotonic() + 5
        while budget.reserved < 2 * size and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # every head has arrived by now
        assert budget.reserved == 2 * size <= budget.limit == 1 << 20
        for sock, (_, body) in zip(socks, requests):
            sock.sendall(body)
        for sock, x in zip(socks, xs):
            status, outputs = read_answer(sock.makefile("rb"))
            assert status == 200, outputs
            check(outputs, x)
    finally:
        for sock in socks:
            sock.close()
    assert budget.reserved == 0


def test_a_client_leaving_mid_body_releases_its_buffer(server):
    budget = server.http_app.body_budget
    head, body = request(images(2, seed=5))
    with connect(server) as sock:
        sock.sendall(head + body[:1000])
        deadline = time.monotonic() + 5
        while budget.reserved == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert budget.reserved == len(body)
    deadline = time.monotonic() + 5
    while budget.reserved and time.monotonic() < deadline:
        time.sleep(0.01)
    assert budget.reserved == 0


def test_a_refused_allocation_leaves_nothing_behind(server, monkeypatch, caplog):
    """``MemoryError`` allocating a body's buffer: the request is served all the same (its
    body gathered as it arrives), nothing stays counted, and no task fails later."""

    def refused(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(http_app, "BodySink", refused)
    x = images(2, seed=6)
    with caplog.at_level(logging.WARNING):
        with connect(server) as sock:
            sock.sendall(b"".join(request(x)))
            status, outputs = read_answer(sock.makefile("rb"))
        time.sleep(0.2)
    assert status == 200, outputs
    check(outputs, x)
    assert server.http_app.body_budget.reserved == 0
    problems = [r for r in caplog.records if r.levelno >= logging.ERROR or "body_sink" in r.getMessage()]
    assert not problems, [r.getMessage() for r in problems]
    assert any("could not be allocated" in r.getMessage() for r in caplog.records)
