"""Small keep-alive HTTP/1.1 clients: blocking sockets and asyncio streams.

Enough HTTP for the Open Inference Protocol: requests with a Content-Length
body, responses with Content-Length or chunked bodies, persistent connections,
TCP_NODELAY, each request sent with one system call (a large tensor straight from its
array's memory, uncopied). Much cheaper per request
than general clients (``http.client`` costs ~100 µs more per round trip),
which matters to latency figures and to a load generator sharing cores with
the server. ``BlockingConnection`` backs ``HTTPClient``, ``ConnectionPool``
backs ``AsyncHTTPClient``::

    connection = BlockingConnection("127.0.0.1", 8000, timeout_s=60)
    status, headers, body = connection.request("GET", "/v2/health/ready")

    pool = ConnectionPool("127.0.0.1", 8000)
    status, headers, body = await pool.request("GET", "/v2/health/ready")
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Optional

from .errors import ProtocolError, ServerUnreachableError

_MAX_HEADER = 64 * 1024
_RECEIVE = 64 * 1024  # a larger recv() size costs an mmap per call (~20 µs)


JOIN_BELOW = 64 * 1024  # smaller requests leave as one buffer: one system call, one segment


def encode_request(method: str, path: str, host_header: bytes, body,
                   headers: Optional[dict]) -> list:
    """The buffers of one request: request line, headers, blank line and ``body`` (bytes,
    or a list of bytes-like parts such as ``rest.encode_infer_parts`` makes). A request of
    ``JOIN_BELOW`` bytes or more keeps its parts after the first as they are: a large
    tensor goes from its array's memory to the socket without a copy."""
    parts = [body] if isinstance(body, (bytes, bytearray, memoryview)) else list(body)
    size = sum(len(part) for part in parts)
    head = [f"{method} {path} HTTP/1.1\r\n".encode(), host_header,
            f"Content-Length: {size}\r\n".encode()]
    head += [f"{k}: {v}\r\n".encode() for k, v in (headers or {}).items()]
    head.append(b"\r\n")
    if size < JOIN_BELOW:
        return [b"".join(head + parts)]
    return [b"".join(head + parts[:1]), *parts[1:]]


def send_buffers(sock: socket.socket, buffers: list) -> None:
    """Send ``buffers`` in order, in one system call where the socket takes them all
    (``sendmsg``; TLS sockets, which have none, one ``sendall`` each)."""
    if len(buffers) == 1 or isinstance(sock, ssl.SSLSocket):
        for buffer in buffers:
            sock.sendall(buffer)
        return
    views = [memoryview(buffer) for buffer in buffers]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if views and sent:
            views[0] = views[0][sent:]


def parse_head(head: bytes) -> tuple[int, dict]:
    """Status and lower-cased headers of a response head (ending in a blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ProtocolError(f"bad HTTP status line {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        if line:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
    return int(parts[1]), headers


class BlockingConnection:
    """One persistent connection over a blocking socket (not thread-safe)."""

    def __init__(self, host: str, port: int, timeout_s: float = 60.0,
                 tls: Optional[ssl.SSLContext] = None):
        self._host_header = f"Host: {host}:{port}\r\n".encode()
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            self._sock = tls.wrap_socket(self._sock, server_hostname=host)
        self._buffer = bytearray()
        self.closed = False

    def request(self, method: str, path: str, body=b"",
                headers: Optional[dict] = None) -> tuple[int, dict, bytes]:
        """Send one request (``body``: bytes or a list of bytes-like parts);
        ``(status, lower-cased headers, body)``.

        Raises ``OSError`` (``ConnectionError`` when the server closed the
        connection) or ``ProtocolError``; the connection is unusable after either.
        """
        send_buffers(self._sock, encode_request(method, path, self._host_header, body, headers))
        end = self._fill_until(b"\r\n\r\n", _MAX_HEADER)
        status, response_headers = parse_head(bytes(self._buffer[:end]))
        del self._buffer[:end + 4]
        response_body = self._read_body(response_headers, method == "HEAD")
        if response_headers.get("connection", "").lower() == "close":
            self.close()
        return status, response_headers, response_body

    def _receive(self) -> None:
        chunk = self._sock.recv(_RECEIVE)
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        self._buffer += chunk

    def _fill_until(self, marker: bytes, limit: int) -> int:
        start = 0
        while True:
            end = self._buffer.find(marker, start)
            if end >= 0:
                return end
            if len(self._buffer) > limit:
                raise ProtocolError(f"no {marker!r} within {limit} bytes of the answer")
            start = max(0, len(self._buffer) - len(marker) + 1)
            self._receive()

    def _take(self, size: int) -> bytes:
        have = len(self._buffer)
        if have >= size:
            data = bytes(self._buffer[:size])
            del self._buffer[:size]
            return data
        data = bytearray(size)  # large bodies land in place, without a copy per chunk
        data[:have] = self._buffer
        self._buffer.clear()
        view = memoryview(data)
        while have < size:
            received = self._sock.recv_into(view[have:])
            if not received:
                raise ConnectionResetError("the server closed the connection")
            have += received
        return bytes(data)

    def _read_body(self, headers: dict, head_only: bool) -> bytes:
        if head_only:
            return b""
        if "content-length" in headers:
            return self._take(int(headers["content-length"]))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                end = self._fill_until(b"\r\n", _MAX_HEADER)
                size = int(bytes(self._buffer[:end]).split(b";")[0], 16)
                del self._buffer[:end + 2]
                chunk = self._take(size + 2)
                if size == 0:
                    return b"".join(chunks)
                chunks.append(chunk[:-2])
        while True:  # no length: the body runs until the server closes
            try:
                self._receive()
            except ConnectionResetError:
                data, self._buffer = bytes(self._buffer), bytearray()
                self.close()
                return data

    def close(self) -> None:
        self.closed = True
        self._sock.close()


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class ConnectionPool:
    """Persistent connections to one ``host:port``, reused across requests."""

    def __init__(self, host: str, port: int, timeout_s: float = 60.0,
                 tls: Optional[ssl.SSLContext] = None):
        self.host, self.port, self.timeout_s, self.tls = host, port, timeout_s, tls
        self._idle: list[_Connection] = []
        self._host_header = f"Host: {host}:{port}\r\n".encode()

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, limit=_MAX_HEADER * 16, ssl=self.tls,
                server_hostname=self.host if self.tls else None)
        except OSError as exc:
            raise ServerUnreachableError(f"cannot connect to {self.host}:{self.port}: "
                                         f"{exc}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    async def request(self, method: str, path: str, body=b"",
                      headers: Optional[dict] = None) -> tuple[int, dict, bytes]:
        """Send one request (``body``: bytes or a list of bytes-like parts);
        ``(status, lower-cased headers, body)``."""
        payload = encode_request(method, path, self._host_header, body, headers)
        reused = bool(self._idle)
        connection = self._idle.pop() if reused else await self._connect()
        try:
            result = await asyncio.wait_for(self._exchange(connection, payload), self.timeout_s)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            connection.close()
            if reused:  # the server closed an idle keep-alive connection: retry once
                return await self.request(method, path, body, headers)
            raise ServerUnreachableError(f"connection to {self.host}:{self.port} failed: "
                                         f"{exc!r}") from None
        except BaseException:
            connection.close()
            raise
        status, response_headers, response_body = result
        if response_headers.get("connection", "").lower() == "close":
            connection.close()
        else:
            self._idle.append(connection)
        return status, response_headers, response_body

    async def _exchange(self, connection: _Connection, payload: list):
        connection.writer.writelines(payload)
        await connection.writer.drain()
        head = await connection.reader.readuntil(b"\r\n\r\n")
        status, headers = parse_head(head[:-4])
        body = await self._read_body(connection.reader, headers)
        return status, headers, body

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, headers: dict) -> bytes:
        if "content-length" in headers:
            return await reader.readexactly(int(headers["content-length"]))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await reader.readexactly(size + 2)
                if size == 0:
                    return b"".join(chunks)
                chunks.append(chunk[:-2])
        return await reader.read()

    async def close(self) -> None:
        """Close every idle connection."""
        for connection in self._idle:
            connection.close()
        self._idle.clear()
