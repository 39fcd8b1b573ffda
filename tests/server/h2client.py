"""A raw HTTP/2 client for the gRPC port: frames written and read by hand, so that tests
can send what no well-behaved client would, and see every frame the server sends."""

from __future__ import annotations

import socket
import struct
import time

import hpack

from flowserve.protocol import protos
from flowserve.clients import http2_wire as wire

PATH = f"/{protos.SERVICE_NAME}/ModelInfer"


def grpc_headers(path: str = PATH, **extra: str) -> list:
    return [(":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", "test"), ("te", "trailers"), ("content-type", "application/grpc"),
            *extra.items()]


def message(payload: bytes, compressed: bool = False) -> bytes:
    return struct.pack(">BL", int(compressed), len(payload)) + payload


class RawH2:
    """One connection: ``send`` frames, ``read`` them back, ``call`` a unary method."""

    def __init__(self, address: str, settings: dict | None = None, preface: bool = True,
                 timeout_s: float = 20.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.buffer, self.next_stream = b"", 1
        if preface:
            payload = b"".join(struct.pack(">HL", k, v) for k, v in (settings or {}).items())
            self.sock.sendall(wire.PREFACE + wire.frame(wire.SETTINGS, 0, 0, payload))

    def close(self) -> None:
        self.sock.close()

    def send(self, kind: int, flags: int, stream_id: int, payload: bytes = b"") -> None:
        self.sock.sendall(wire.frame(kind, flags, stream_id, payload))

    def send_headers(self, stream_id: int, headers: list, end_stream: bool = False) -> None:
        flags = wire.END_HEADERS | (wire.END_STREAM if end_stream else 0)
        self.send(wire.HEADERS, flags, stream_id, self.encoder.encode(headers))

    def send_data(self, stream_id: int, body: bytes, end_stream: bool = True) -> None:
        """``body`` in frames of the default largest size, the last one ending the stream."""
        size = wire.DEFAULT_FRAME_BYTES
        pieces = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
        self.sock.sendall(b"".join(
            wire.frame(wire.DATA, wire.END_STREAM if end_stream and i == len(pieces) - 1
                        else 0, stream_id, piece) for i, piece in enumerate(pieces)))

    def new_stream(self) -> int:
        stream_id, self.next_stream = self.next_stream, self.next_stream + 2
        return stream_id

    def _frame(self):
        while (got := wire.read_frame(self.buffer, 0)) is None:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        kind, flags, stream_id, start, end = got
        payload, self.buffer = self.buffer[start:end], self.buffer[end:]
        return kind, flags, stream_id, payload

    def read(self):
        """The next frame as (type, flags, stream id, payload); None once the server closed.

        A HEADERS frame's payload comes decoded, as a dict, with its CONTINUATION frames
        joined on: HPACK's table is the connection's, so every header block must pass through
        the decoder in the order sent, including those of streams a test ignores."""
        got = self._frame()
        if got is None or got[0] != wire.HEADERS:
            return got
        kind, flags, stream_id, block = got
        while not flags & wire.END_HEADERS:
            more = self._frame()
            if more is None:
                return None
            block += more[3]
            flags |= more[1] & wire.END_HEADERS
        # raw: a value may be bytes that are not UTF-8 (a "-bin" header, or an echo of a
        # client's garbage), so text is made here without failing
        headers = self.decoder.decode(block, raw=True)
        return kind, flags, stream_id, {name.decode("latin-1"): value.decode("utf-8", "replace")
                                        for name, value in headers}

    def until(self, kind: int, stream_id: int | None = None):
        """Read (acknowledging SETTINGS) until a frame of ``kind``; None if the server closed."""
        while True:
            got = self.read()
            if got is None or (got[0] == kind and stream_id in (None, got[2])):
                return got
            if got[0] == wire.SETTINGS and not got[1] & wire.ACK:
                self.send(wire.SETTINGS, wire.ACK, 0)

    def goaway_code(self):
        """The error code of the server's GOAWAY, or None if it closed without one."""
        got = self.until(wire.GOAWAY)
        return None if got is None else struct.unpack(">L", got[3][4:8])[0]

    def call(self, body: bytes, headers: list | None = None, stream_id: int | None = None):
        """One request; returns (response headers, DATA bytes, trailers) of its stream."""
        stream_id = stream_id or self.new_stream()
        self.send_headers(stream_id, headers or grpc_headers())
        self.send_data(stream_id, body)
        blocks, data = [], b""
        while True:
            got = self.read()
            assert got is not None, "the server closed the connection"
            kind, flags, sid, payload = got
            if kind == wire.SETTINGS and not flags & wire.ACK:
                self.send(wire.SETTINGS, wire.ACK, 0)
            if sid != stream_id:
                continue
            if kind == wire.DATA:
                data += payload
            elif kind == wire.HEADERS:
                blocks.append(payload)
            elif kind == wire.RST_STREAM:
                raise AssertionError(f"stream reset: {struct.unpack('>L', payload)[0]}")
            if flags & wire.END_STREAM:
                return blocks[0], data, blocks[-1]


ZEROS = memoryview(bytes(1 << 20))  # the body bytes of every half-sent message


def send_half(client: RawH2, announced: int, seconds: float) -> tuple[int, str | None]:
    """A unary call announcing an ``announced``-byte message, sent for ``seconds`` as far as
    the server's flow-control windows allow and never finished (its last byte is held back).
    Returns the bytes sent and how the call ended meanwhile ("reset", "trailers",
    "goaway"), or None while it is open."""
    stream = client.new_stream()
    client.send_headers(stream, grpc_headers())
    client.send(wire.DATA, 0, stream, struct.pack(">BL", 0, announced))
    windows = {"connection": 65535 - 5, "stream": 65535 - 5, "frame": 16384}
    deadline, sent = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        size = min(windows["connection"], windows["stream"], announced - 1 - sent, len(ZEROS))
        if size > 0:  # all the windows allow at once, in frames of the largest size
            step = windows["frame"]
            client.sock.sendall(b"".join(wire.frame(wire.DATA, 0, stream, ZEROS[at:min(at + step, size)])
                                         for at in range(0, size, step)))
            windows["connection"] -= size
            windows["stream"] -= size
            sent += size
        ended = _window_frames(client, stream, windows, 0.0001 if size > 0 else 0.05)
        if ended:
            return sent, ended
    return sent, None


def _window_frames(client: RawH2, stream: int, windows: dict, timeout_s: float) -> str | None:
    """Read the frames that came within ``timeout_s``, updating ``windows``; how ``stream``
    ended, if it did."""
    client.sock.settimeout(timeout_s)
    try:
        while (got := client.read()) is not None:
            kind, flags, stream_id, payload = got
            if kind == wire.WINDOW_UPDATE:
                windows["connection" if stream_id == 0 else "stream"] += struct.unpack(">L", payload)[0]
            elif kind == wire.SETTINGS and not flags & wire.ACK:
                for offset in range(0, len(payload), 6):
                    key, value = struct.unpack(">HL", payload[offset:offset + 6])
                    if key == 4:  # INITIAL_WINDOW_SIZE: open streams' windows move with it
                        windows["stream"] += value - windows.get("initial", 65535)
                        windows["initial"] = value
                    elif key == 5:
                        windows["frame"] = value
                client.send(wire.SETTINGS, wire.ACK, 0)
            elif kind == wire.PING and not flags & wire.ACK:
                client.send(wire.PING, wire.ACK, 0, payload)
            elif kind == wire.GOAWAY:
                return "goaway"
            elif stream_id == stream and kind == wire.RST_STREAM:
                return "reset"
            elif stream_id == stream and kind == wire.HEADERS and flags & wire.END_STREAM:
                return "trailers"
            client.sock.settimeout(0.0001)
    except (TimeoutError, BlockingIOError):
        pass
    finally:
        client.sock.settimeout(20.0)
    return None
