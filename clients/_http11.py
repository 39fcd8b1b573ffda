"""A small keep-alive HTTP/1.1 client over asyncio streams (used by ``AsyncHTTPClient``).

Enough HTTP for the Open Inference Protocol: requests with a Content-Length
body, responses with Content-Length or chunked bodies, a pool of persistent
connections, TCP_NODELAY. Much cheaper per request than general clients,
which matters to a load generator sharing cores with the server::

    pool = ConnectionPool("127.0.0.1", 8000)
    status, headers, body = await pool.request("GET", "/v2/health/ready")
"""

from __future__ import annotations

import asyncio
import socket
from typing import Optional

from .errors import ProtocolError, ServerUnreachableError

_MAX_HEADER = 64 * 1024


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class ConnectionPool:
    """Persistent connections to one ``host:port``, reused across requests."""

    def __init__(self, host: str, port: int, timeout_s: float = 60.0):
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._idle: list[_Connection] = []
        self._host_header = f"Host: {host}:{port}\r\n".encode()

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port,
                                                           limit=_MAX_HEADER * 16)
        except OSError as exc:
            raise ServerUnreachableError(f"cannot connect to {self.host}:{self.port}: "
                                         f"{exc}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: Optional[dict] = None) -> tuple[int, dict, bytes]:
        """Send one request; ``(status, lower-cased headers, body)``."""
        head = [f"{method} {path} HTTP/1.1\r\n".encode(), self._host_header,
                f"Content-Length: {len(body)}\r\n".encode()]
        head += [f"{k}: {v}\r\n".encode() for k, v in (headers or {}).items()]
        payload = b"".join(head) + b"\r\n" + body
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

    async def _exchange(self, connection: _Connection, payload: bytes):
        connection.writer.write(payload)
        await connection.writer.drain()
        head = await connection.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise ProtocolError(f"bad HTTP status line {lines[0]!r}")
        headers = {}
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
        body = await self._read_body(connection.reader, headers)
        return int(parts[1]), headers, body

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
