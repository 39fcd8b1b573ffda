"""HTTP/2 server connections for the gRPC front end (RFC 9113, cleartext, prior knowledge).

One ``Http2Connection`` per TCP connection: it parses frames, decodes header blocks
(``hpack``), keeps both directions' flow-control windows and hands each request
stream to an application, which answers through the stream::

    class Echo:
        def request_started(self, stream): ...   # stream.headers is complete
        def body_received(self, stream): ...     # stream.body grew, or stream.ended
        def request_reset(self, stream): ...     # the client reset it, or the connection went

    server = await loop.create_server(lambda: Http2Connection(Echo(), Http2Limits()), sock=s)

A response leaves in one system call where the windows allow (``Stream.respond``).
What a client may make the server hold is bounded: header blocks by
``max_header_list_bytes``, streams by ``max_concurrent_streams`` (a stream counts until
its application closes it, reset or not), unsent output by pausing reads while the
socket's buffer is full. A protocol violation ends the connection with GOAWAY.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
from typing import Optional, Protocol

import hpack

from flowserve.clients import http2_wire as wire  # the wire facts the clients share

log = logging.getLogger("flowserve.server")

LINGER_S = 2.0  # how long a connection that failed reads on after its GOAWAY


@dataclasses.dataclass(frozen=True)
class Http2Limits:
    """What one connection may make the server hold, and the settings it advertises."""

    max_header_list_bytes: int = 64 * 1024
    max_concurrent_streams: int = 100
    stream_window: int = 1 << 20  # bytes a client may send on a stream before an update
    connection_window: int = 1 << 24  # ... on all its streams together
    max_frame_bytes: int = 1 << 20  # largest frame accepted (SETTINGS_MAX_FRAME_SIZE)
    preface_timeout_s: float = 10.0  # to send the connection preface after connecting


class ProtocolViolation(Exception):
    """A connection error: the connection ends with GOAWAY carrying ``code``."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class Application(Protocol):
    def request_started(self, stream: "Stream") -> None: ...

    def body_received(self, stream: "Stream") -> None: ...

    def request_reset(self, stream: "Stream") -> None: ...


class Stream:
    """One request and its response. The application reads ``headers``, ``body`` (the
    bytes received and not yet taken) and ``ended``, keeps what it needs in ``state``,
    and ends the stream with ``respond``, ``send_trailers`` or ``reset``."""

    __slots__ = ("id", "headers", "body", "ended", "state", "closed", "was_reset",
                 "_connection", "_send_window", "_pending", "_receive_window")

    def __init__(self, connection: "Http2Connection", stream_id: int, headers: dict,
                 send_window: int, receive_window: int):
        self.id, self.headers, self._connection = stream_id, headers, connection
        self.body, self.ended, self.state = bytearray(), False, None
        self.closed = self.was_reset = False
        self._send_window, self._pending = send_window, []  # [(bytes, is_data, end)]
        self._receive_window = receive_window

    def respond(self, headers: bytes, data: bytes, trailers: bytes) -> None:
        """HEADERS, DATA and trailing HEADERS (END_STREAM), in one write where the
        flow-control windows allow; the rest follows as the client grants window."""
        if self.closed:
            return
        connection = self._connection
        connection.queue_headers(self, headers, end_stream=False)
        connection.queue_data(self, data)
        self.send_trailers(trailers)

    def send_headers(self, block: bytes) -> None:
        if not (self.closed or self.was_reset):
            self._connection.queue_headers(self, block, end_stream=False)
            self._connection.flush()

    def send_data(self, data: bytes) -> None:
        if not (self.closed or self.was_reset):
            self._connection.queue_data(self, data)
            self._connection.flush()

    def send_trailers(self, block: bytes) -> None:
        """The last HEADERS frame (END_STREAM); the stream is closed once it leaves
        (at once when the client reset it: nothing is sent then)."""
        if self.closed:
            return
        if not self.was_reset:
            self._connection.queue_headers(self, block, end_stream=True)
        self.closed = True
        if not self._pending:
            self._connection.release(self)
        self._connection.flush()

    def reset(self, code: int = wire.CANCEL) -> None:
        """RST_STREAM (unless the client reset it first) and close."""
        if not self.closed:
            self.closed = self.ended = True  # both ways: nothing more is read or sent
            self._pending.clear()
            if not self.was_reset:
                self._connection.write(wire.rst_stream(self.id, code))
            self._connection.release(self)
            self._connection.flush()


class Http2Connection(asyncio.Protocol):
    """The server side of one HTTP/2 connection (see the module's docstring)."""

    def __init__(self, app: Application, limits: Http2Limits,
                 connections: Optional[set] = None):
        self.app, self.limits = app, limits
        self._registry = connections  # the server's open connections, for shutdown
        self._decoder = hpack.Decoder()
        self._decoder.max_header_list_size = limits.max_header_list_bytes
        self._indexed_blocks: dict[bytes, dict] = {}
        self._preface_seen = False
        # the reads holding an incomplete frame (or preface), joined once it is whole: a
        # large DATA frame arrives in many reads, and joining at each would copy it over and over
        self._partial: list[bytes] = []
        self._partial_size = self._partial_need = 0
        self._streams: dict[int, Stream] = {}
        self._last_stream_id = 0
        self._block: Optional[list] = None  # [stream id, flags, fragments] until END_HEADERS
        self._peer_frame_bytes, self._peer_window = wire.DEFAULT_FRAME_BYTES, wire.DEFAULT_WINDOW
        self._send_window = wire.DEFAULT_WINDOW
        self._receive_window = wire.DEFAULT_WINDOW
        self._out: list[bytes] = []
        self._going_away = self._failed = False
        self.transport = None
        self._timer = None

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._registry is not None:
            self._registry.add(self)
        self._timer = asyncio.get_running_loop().call_later(
            self.limits.preface_timeout_s, self._preface_timed_out)
        limits = self.limits
        self.write(wire.settings_frame({
            wire.SETTINGS_ENABLE_PUSH: 0,
            wire.SETTINGS_MAX_CONCURRENT_STREAMS: limits.max_concurrent_streams,
            wire.SETTINGS_INITIAL_WINDOW_SIZE: limits.stream_window,
            wire.SETTINGS_MAX_FRAME_SIZE: limits.max_frame_bytes,
            wire.SETTINGS_MAX_HEADER_LIST_SIZE: limits.max_header_list_bytes}))
        self._grant(0, limits.connection_window - wire.DEFAULT_WINDOW)
        self._receive_window = limits.connection_window
        self.flush()

    def connection_lost(self, exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._registry is not None:
            self._registry.discard(self)
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.was_reset = stream.closed = True
            self.app.request_reset(stream)

    def pause_writing(self) -> None:  # the client does not read: stop reading its requests
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._failed:
            return
        if self._partial:
            self._partial.append(data)
            self._partial_size += len(data)
            if self._partial_size < self._partial_need:
                return
            buffer, self._partial = b"".join(self._partial), []
        else:
            buffer = data
        try:
            if not self._preface_seen:
                buffer = self._read_preface(buffer)
            position = self._read_frames(buffer)
        except ProtocolViolation as exc:
            return self.close_with(exc.code, str(exc))
        except hpack.HPACKError as exc:
            return self.close_with(wire.COMPRESSION_ERROR, f"header block: {exc}")
        except Exception as exc:  # a fault of the server's own: this connection ends
            log.exception("error on an HTTP/2 connection")
            return self.close_with(wire.INTERNAL_ERROR, f"internal error ({type(exc).__name__})")
        if position < len(buffer):
            rest = buffer[position:]
            self._partial, self._partial_size = [rest], len(rest)
            self._partial_need = self._bytes_to_parse(rest)
        self.flush()

    def _bytes_to_parse(self, rest: bytes) -> int:
        """How many bytes the unparsed ``rest`` must grow to before parsing can go on: the
        preface, a frame header, or the whole frame the header announces."""
        if not self._preface_seen:
            return len(wire.PREFACE)
        if len(rest) < 9:
            return 9
        return 9 + int.from_bytes(rest[:3], "big")

    # -- reading --------------------------------------------------------------------------

    def _read_preface(self, buffer: bytes) -> bytes:
        if len(buffer) < len(wire.PREFACE):
            if not wire.PREFACE.startswith(buffer):
                raise ProtocolViolation(wire.PROTOCOL_ERROR, "expected the HTTP/2 connection "
                                        "preface (gRPC speaks HTTP/2 with prior knowledge)")
            return buffer
        if not buffer.startswith(wire.PREFACE):
            raise ProtocolViolation(wire.PROTOCOL_ERROR, "expected the HTTP/2 connection preface")
        self._preface_seen = True
        self._timer.cancel()
        self._timer = None
        return buffer[len(wire.PREFACE):]

    def _read_frames(self, buffer: bytes) -> int:
        if not self._preface_seen:
            return 0
        position, end, view = 0, len(buffer), memoryview(buffer)
        while end - position >= 9:
            size, kind, flags, stream_id = wire.frame_header(buffer, position)
            if size > self.limits.max_frame_bytes:
                raise ProtocolViolation(wire.FRAME_SIZE_ERROR, f"a frame of {size} bytes; "
                                        f"at most {self.limits.max_frame_bytes} accepted")
            if end - position - 9 < size:
                break
            payload = view[position + 9:position + 9 + size]
            position += 9 + size
            self._dispatch(kind, flags, stream_id, payload)
        return position

    def _dispatch(self, kind: int, flags: int, stream_id: int, payload: memoryview) -> None:
        if self._block is not None and (kind != wire.CONTINUATION or stream_id != self._block[0]):
            raise ProtocolViolation(wire.PROTOCOL_ERROR, "a header block was interrupted by "
                                    "another frame before END_HEADERS")
        handler = self._HANDLERS.get(kind)
        if handler is not None:  # unknown frame types are ignored (RFC 9113, 4.1)
            handler(self, flags, stream_id, payload)

    def _on_data(self, flags: int, stream_id: int, payload: memoryview) -> None:
        self._count_received(stream_id, len(payload))
        data = _unpad(flags, payload)
        stream = self._streams.get(stream_id)
        if stream is None or stream.ended:
            if stream_id > self._last_stream_id:
                raise ProtocolViolation(wire.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # a stream answered and reset already: what was in flight is dropped
        stream._receive_window -= len(payload)
        if stream._receive_window < 0:
            raise ProtocolViolation(wire.FLOW_CONTROL_ERROR, f"stream {stream_id} sent more than "
                                    "its window")
        stream.ended = bool(flags & wire.END_STREAM)
        if not stream.ended and stream._receive_window <= self.limits.stream_window // 2:
            self._grant(stream_id, self.limits.stream_window - stream._receive_window)
            stream._receive_window = self.limits.stream_window
        if stream.closed:
            return  # answered already (an error): what still arrives is dropped
        stream.body += data
        self.app.body_received(stream)

    def _count_received(self, stream_id: int, size: int) -> None:
        """Connection flow control: the window is granted back as data arrives; what a
        client may make the server hold is bounded by the application's message limit
        times ``max_concurrent_streams``."""
        if stream_id == 0:
            raise ProtocolViolation(wire.PROTOCOL_ERROR, "DATA on stream 0")
        self._receive_window -= size
        if self._receive_window < 0:
            raise ProtocolViolation(wire.FLOW_CONTROL_ERROR, "the client sent more than the "
                                    "connection's window")
        if self._receive_window <= self.limits.connection_window // 2:
            self._grant(0, self.limits.connection_window - self._receive_window)
            self._receive_window = self.limits.connection_window

    def _on_headers(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id == 0 or stream_id % 2 == 0:
            raise ProtocolViolation(wire.PROTOCOL_ERROR, f"HEADERS on stream {stream_id}: "
                                    "client streams have odd numbers")
        fragment = _unpad(flags, payload)
        if flags & wire.PRIORITY_FLAG:
            if len(fragment) < 5:
                raise ProtocolViolation(wire.FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            fragment = fragment[5:]
        self._block = [stream_id, flags, [bytes(fragment)], len(fragment)]
        self._check_block_size()
        if flags & wire.END_HEADERS:
            self._end_block()

    def _on_continuation(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if self._block is None:
            raise ProtocolViolation(wire.PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        self._block[2].append(bytes(payload))
        self._block[3] += len(payload)
        self._check_block_size()
        if flags & wire.END_HEADERS:
            self._end_block()

    def _check_block_size(self) -> None:
        if self._block[3] > self.limits.max_header_list_bytes:
            raise ProtocolViolation(wire.COMPRESSION_ERROR, f"a header block over "
                                    f"{self.limits.max_header_list_bytes} bytes")

    def _end_block(self) -> None:
        stream_id, flags, fragments, _ = self._block
        self._block = None
        headers = self._decode(b"".join(fragments))
        stream = self._streams.get(stream_id)
        if stream is not None:  # trailers: they must end the request
            if not flags & wire.END_STREAM or stream.ended:
                raise ProtocolViolation(wire.PROTOCOL_ERROR, f"a second header block on stream "
                                        f"{stream_id} without END_STREAM")
            stream.ended = True
            if not stream.closed:
                self.app.body_received(stream)
            return
        if stream_id <= self._last_stream_id:
            raise ProtocolViolation(wire.STREAM_CLOSED, f"HEADERS on closed stream {stream_id}")
        self._last_stream_id = stream_id
        if self._going_away:
            return  # after GOAWAY new streams are ignored; the client retries elsewhere
        if len(self._streams) >= self.limits.max_concurrent_streams:
            self.write(wire.rst_stream(stream_id, wire.REFUSED_STREAM))
            return
        stream = Stream(self, stream_id, headers, self._peer_window,
                        self.limits.stream_window)
        stream.ended = bool(flags & wire.END_STREAM)
        self._streams[stream_id] = stream
        self.app.request_started(stream)
        if stream.ended and not stream.closed:
            self.app.body_received(stream)

    def _decode(self, block: bytes) -> dict:
        """The header block as a dict. A block of indexed fields only (what gRPC clients
        send from their second call on) leaves the table as it is, so its decoding is
        kept until a block that may change the table arrives."""
        headers = self._indexed_blocks.get(block)
        if headers is not None:
            return headers
        headers = {name.decode("latin-1"): value.decode("latin-1")
                   for name, value in self._decoder.decode(block, raw=True)}
        indexed_only = all(0x80 <= byte < 0xFF for byte in block)
        if not indexed_only or len(self._indexed_blocks) >= 64:
            self._indexed_blocks.clear()
        if indexed_only:
            self._indexed_blocks[block] = headers
        return headers

    def _on_rst_stream(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise ProtocolViolation(wire.FRAME_SIZE_ERROR, "RST_STREAM of other than 4 bytes")
        if stream_id == 0 or stream_id > self._last_stream_id:
            raise ProtocolViolation(wire.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
        stream = self._streams.get(stream_id)
        if stream is not None and not stream.was_reset:
            stream.was_reset = True
            stream._pending.clear()
            self.app.request_reset(stream)  # it stays counted until the application closes it

    def _on_settings(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id != 0:
            raise ProtocolViolation(wire.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & wire.ACK:
            if len(payload):
                raise ProtocolViolation(wire.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise ProtocolViolation(wire.FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes")
        for offset in range(0, len(payload), 6):
            self._apply_setting(*wire.SETTING.unpack_from(payload, offset))
        self.write(wire.frame(wire.SETTINGS, wire.ACK, 0))
        self._send_pending()

    def _apply_setting(self, key: int, value: int) -> None:
        if key == wire.SETTINGS_INITIAL_WINDOW_SIZE:
            if value > wire.MAX_WINDOW:
                raise ProtocolViolation(wire.FLOW_CONTROL_ERROR, f"initial window {value}")
            delta, self._peer_window = value - self._peer_window, value
            for stream in self._streams.values():
                stream._send_window += delta
        elif key == wire.SETTINGS_MAX_FRAME_SIZE:
            if not wire.DEFAULT_FRAME_BYTES <= value <= 2**24 - 1:
                raise ProtocolViolation(wire.PROTOCOL_ERROR, f"max frame size {value}")
            self._peer_frame_bytes = value
        elif key == wire.SETTINGS_ENABLE_PUSH and value > 1:
            raise ProtocolViolation(wire.PROTOCOL_ERROR, f"enable push {value}")
        # the header table size only bounds our encoder's table, and it indexes nothing

    def _on_ping(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id != 0 or len(payload) != 8:
            code = wire.FRAME_SIZE_ERROR if stream_id == 0 else wire.PROTOCOL_ERROR
            raise ProtocolViolation(code, "PING must carry 8 bytes on stream 0")
        if not flags & wire.ACK:
            self.write(wire.frame(wire.PING, wire.ACK, 0, bytes(payload)))

    def _on_goaway(self, flags: int, stream_id: int, payload: memoryview) -> None:
        self._going_away = True  # the client opens no more streams; those open finish
        self._close_when_idle()

    def _on_window_update(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise ProtocolViolation(wire.FRAME_SIZE_ERROR, "WINDOW_UPDATE of other than 4 bytes")
        increment = wire.U32.unpack(payload)[0] & wire.MAX_WINDOW
        if stream_id == 0:
            if increment == 0:
                raise ProtocolViolation(wire.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > wire.MAX_WINDOW:
                raise ProtocolViolation(wire.FLOW_CONTROL_ERROR, "connection window over 2^31-1")
        else:
            stream = self._streams.get(stream_id)
            if stream is None:
                return  # a stream that just closed: its update may cross our end
            stream._send_window += increment
            if increment == 0 or stream._send_window > wire.MAX_WINDOW:
                self.write(wire.rst_stream(stream_id, wire.FLOW_CONTROL_ERROR))
                stream.was_reset = True
                self.app.request_reset(stream)
                return
        self._send_pending()

    def _on_priority(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 5:
            raise ProtocolViolation(wire.FRAME_SIZE_ERROR, "PRIORITY of other than 5 bytes")

    def _on_push_promise(self, flags: int, stream_id: int, payload: memoryview) -> None:
        raise ProtocolViolation(wire.PROTOCOL_ERROR, "PUSH_PROMISE from a client")

    _HANDLERS = {wire.DATA: _on_data, wire.HEADERS: _on_headers, wire.PRIORITY: _on_priority,
                 wire.RST_STREAM: _on_rst_stream, wire.SETTINGS: _on_settings,
                 wire.PUSH_PROMISE: _on_push_promise, wire.PING: _on_ping, wire.GOAWAY: _on_goaway,
                 wire.WINDOW_UPDATE: _on_window_update, wire.CONTINUATION: _on_continuation}

    # -- receive flow control -------------------------------------------------------------

    def _grant(self, stream_id: int, increment: int) -> None:
        if increment > 0:
            self.write(wire.window_update(stream_id, increment))

    # -- writing --------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        self._out.append(data)

    def flush(self) -> None:
        if self._out and self.transport is not None and not self.transport.is_closing():
            out, self._out = self._out, []
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def queue_headers(self, stream: Stream, block: bytes, end_stream: bool) -> None:
        flags = wire.END_STREAM if end_stream else 0
        if stream._pending:
            stream._pending.append((block, False, flags))
            return
        self._write_headers(stream.id, block, flags)

    def _write_headers(self, stream_id: int, block: bytes, flags: int) -> None:
        limit = self._peer_frame_bytes
        if len(block) <= limit:
            self.write(wire.frame(wire.HEADERS, flags | wire.END_HEADERS, stream_id, block))
            return
        self.write(wire.frame(wire.HEADERS, flags, stream_id, block[:limit]))
        for start in range(limit, len(block), limit):
            last = start + limit >= len(block)
            self.write(wire.frame(wire.CONTINUATION, wire.END_HEADERS if last else 0, stream_id,
                             block[start:start + limit]))

    def queue_data(self, stream: Stream, data: bytes) -> None:
        if stream._pending:
            stream._pending.append((data, True, 0))
            return
        rest = self._write_data(stream, data)
        if rest:
            stream._pending.append((rest, True, 0))

    def _write_data(self, stream: Stream, data: bytes) -> bytes:
        """Write what the windows allow of ``data``; return the rest."""
        view, sent = memoryview(data), 0
        while sent < len(data):
            size = min(len(data) - sent, self._peer_frame_bytes, self._send_window,
                       stream._send_window)
            if size <= 0:
                break
            self.write(wire.frame(wire.DATA, 0, stream.id, bytes(view[sent:sent + size])))
            sent += size
            self._send_window -= size
            stream._send_window -= size
        return data[sent:] if sent < len(data) else b""

    def _send_pending(self) -> None:
        """After a window grew: send what streams held back, in stream order."""
        for stream in list(self._streams.values()):
            pending = stream._pending
            while pending and not stream.was_reset:
                chunk, is_data, flags = pending[0]
                if is_data:
                    rest = self._write_data(stream, chunk)
                    if rest:
                        pending[0] = (rest, True, 0)
                        break
                else:
                    self._write_headers(stream.id, chunk, flags)
                pending.pop(0)
            if not pending and stream.closed:
                self.release(stream)

    def release(self, stream: Stream) -> None:
        """The stream is done on both sides as far as the application goes; a response
        that ended before its request did is followed by RST_STREAM(NO_ERROR), which asks
        the client to stop sending (RFC 9113, 8.1)."""
        if self._streams.get(stream.id) is stream:
            del self._streams[stream.id]
            if not stream.ended and not stream.was_reset:
                self.write(wire.rst_stream(stream.id, wire.NO_ERROR))
            stream.body = bytearray()
            self._close_when_idle()

    # -- ending ---------------------------------------------------------------------------

    def go_away(self) -> None:
        """Graceful shutdown: GOAWAY naming the last stream taken; the open ones finish."""
        if not self._going_away and self.transport is not None:
            self._going_away = True
            self.write(wire.goaway(self._last_stream_id, wire.NO_ERROR))
            self.flush()
        self._close_when_idle()

    def _close_when_idle(self) -> None:
        if self._going_away and not self._streams and self.transport is not None:
            self.flush()
            self.transport.close()

    def close_with(self, code: int, message: str) -> None:
        """A connection error: GOAWAY with ``code`` and ``message``, end of our side, and
        what the client still sends read and dropped for ``LINGER_S`` before the close, so
        that its unread bytes do not turn the close into a reset that loses the GOAWAY."""
        log.info("closing an HTTP/2 connection: %s", message)
        self._going_away = self._failed = True
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self._out.clear()
        self.write(wire.goaway(self._last_stream_id, code, message.encode()[:512]))
        self.flush()
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER_S, transport.close)

    def abort(self) -> None:
        """Close at once (the grace period of a shutdown ran out)."""
        if self.transport is not None:
            self.transport.abort()

    def _preface_timed_out(self) -> None:
        self._timer = None
        if not self._preface_seen and self.transport is not None:
            self.transport.close()


def _unpad(flags: int, payload: memoryview) -> memoryview:
    if not flags & wire.PADDED:
        return payload
    if not len(payload) or payload[0] >= len(payload):
        raise ProtocolViolation(wire.PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1:len(payload) - payload[0]]
