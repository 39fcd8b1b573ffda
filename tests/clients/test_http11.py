"""The clients' own HTTP/1.1 connection against a scripted socket server."""

from __future__ import annotations

import contextlib
import socket
import threading

import numpy as np
import pytest

from flowserve.clients import HTTPClient, ProtocolError, ServerUnreachableError, rest
from flowserve.clients._http11 import JOIN_BELOW, BlockingConnection, encode_request, send_buffers


@contextlib.contextmanager
def scripted_server(answers: list[bytes]):
    """Accepts connections; answers each request (up to its blank line) with the next answer.

    An answer ending in ``b"<close>"`` is sent without that marker and the
    connection is closed after it.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    requests: list[bytes] = []

    def serve():
        script, connection = list(answers), None
        with contextlib.suppress(OSError):
            while script:
                if connection is None:
                    connection, _ = listener.accept()
                request = _read_request(connection)
                if request is None:
                    connection.close()
                    connection = None
                    continue
                requests.append(request)
                answer = script.pop(0)
                connection.sendall(answer.removesuffix(b"<close>"))
                if answer.endswith(b"<close>"):
                    connection.close()
                    connection = None
        if connection is not None:
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], requests
    finally:
        listener.close()
        thread.join(10)


def _read_request(connection: socket.socket):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


def test_content_length_chunked_and_close_delimited_bodies():
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Thing: a:b\r\n\r\nhello",
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\nuntil the end<close>",
    ]
    with scripted_server(answers) as (port, requests):
        connection = BlockingConnection("127.0.0.1", port, timeout_s=10)
        assert connection.request("GET", "/a") == (200, {"content-length": "5",
                                                         "x-thing": "a:b"}, b"hello")
        status, headers, body = connection.request("POST", "/b", b"xyz", {"X-Y": "1"})
        assert (status, body) == (201, b"abcde")
        assert connection.request("GET", "/c")[2] == b"until the end"
        assert connection.closed
    assert requests[1].startswith(b"POST /b HTTP/1.1\r\n") and requests[1].endswith(b"\r\n\r\nxyz")
    assert b"Content-Length: 3\r\n" in requests[1] and b"X-Y: 1\r\n" in requests[1]


def test_connection_close_header_and_reconnect_after_a_server_side_close():
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok<close>",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok<close>",  # closes without saying
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nyes",
    ]
    with scripted_server(answers) as (port, requests):
        client = HTTPClient(f"http://127.0.0.1:{port}", timeout_s=10)
        assert client.request("GET", "/1")[2] == b"ok"
        assert client.request("GET", "/2")[2] == b"ok"  # a new connection
        assert client.request("GET", "/3")[2] == b"yes"  # the stale one is retried once
    assert len(requests) == 3


def test_malformed_answer_raises_protocol_error():
    with scripted_server([b"SMTP ready\r\n\r\n"]) as (port, _):
        with pytest.raises(ProtocolError, match="bad HTTP status line"):
            HTTPClient(f"http://127.0.0.1:{port}", timeout_s=10).request("GET", "/")


def test_server_that_closes_before_answering_is_unreachable():
    with scripted_server([b"<close>", b"<close>"]) as (port, _):
        with pytest.raises(ServerUnreachableError, match="closed the connection"):
            HTTPClient(f"http://127.0.0.1:{port}", timeout_s=10).request("GET", "/")


def test_small_requests_are_one_buffer_and_large_tensors_stay_views():
    small = np.ones((1, 64), np.float32)
    parts, headers = rest.encode_infer_parts({"x": small})
    (request,) = encode_request("POST", "/v2/models/m/infer", b"Host: h\r\n", parts, headers)
    assert request.endswith(b"".join(parts)) and b"Content-Length: %d\r\n" % len(b"".join(parts)) in request
    large = np.arange(JOIN_BELOW, dtype=np.float32).reshape(-1, 64)
    parts, headers = rest.encode_infer_parts({"x": large})
    head, tensor = encode_request("POST", "/v2/models/m/infer", b"Host: h\r\n", parts, headers)
    assert head.endswith(parts[0]) and np.shares_memory(np.frombuffer(tensor, np.uint8), large)
    assert b"Content-Length: %d\r\n" % (len(parts[0]) + large.nbytes) in head


def test_buffers_larger_than_the_socket_takes_arrive_whole_and_in_order():
    """``send_buffers`` picks up after partial ``sendmsg`` calls, mid-buffer included."""
    sender, receiver = socket.socketpair()
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sender.settimeout(10)  # as the clients' sockets: a send may then take part of the data
    rng = np.random.default_rng(0)
    buffers = [b"head", memoryview(rng.integers(0, 255, 300_001, np.uint8)), b"", bytes(rng.bytes(70_000))]
    expected, received = b"".join(buffers), bytearray()

    def read():
        while len(received) < len(expected):
            received.extend(receiver.recv(65536))

    reader = threading.Thread(target=read)
    reader.start()
    with sender, receiver:
        send_buffers(sender, buffers)
        reader.join(10)
    assert bytes(received) == expected
