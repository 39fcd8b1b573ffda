"""The clients' own gRPC channel (``AsyncGRPCClient``, ``flowserve perf``) against hostile
servers on loopback: each makes a call fail with a clear error within its timeout, never
hang or grow without bound (issue 25: the channel stays only if it passes these)."""

from __future__ import annotations

import asyncio
import struct

import hpack

from flowserve.clients import http2_wire as wire
from flowserve.clients._grpc_channel import GrpcChannel
from flowserve.clients.errors import ProtocolError

PATH = "/inference.GRPCInferenceService/ModelInfer"


class HostileServer(asyncio.Protocol):
    """Reads the client's preface, then does ``behave(transport)`` once a request's
    HEADERS came; reads nothing more when ``deaf``."""

    def __init__(self, behave, deaf: bool = False):
        self.behave, self.deaf, self.started, self.transport = behave, deaf, False, None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(wire.settings_frame({wire.SETTINGS_INITIAL_WINDOW_SIZE: 0}))

    def data_received(self, data: bytes) -> None:
        if not self.started and bytes([wire.HEADERS]) in data:
            self.started = True
            if self.deaf:
                self.transport.pause_reading()
            self.behave(self.transport)


async def _call(behave, body: bytes = b"", timeout_s: float = 2.0, deaf: bool = False,
                **channel_options):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HostileServer(behave, deaf), "127.0.0.1", 0)
    channel = GrpcChannel("127.0.0.1", server.sockets[0].getsockname()[1], **channel_options)
    started = loop.time()
    try:
        await channel.unary(PATH, body, (), timeout_s)
    except Exception as exc:  # noqa: BLE001 (what the call ended with is the result)
        return exc, loop.time() - started
    finally:
        await channel.close()
        server.close()
    return None, loop.time() - started


def _run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_a_window_never_granted_ends_the_call_at_its_timeout():
    error, took = _run(_call(lambda transport: None, body=b"x" * 100_000, timeout_s=1.0))
    assert isinstance(error, TimeoutError) and took < 5


def test_an_endless_answer_is_cut_at_the_answer_limit():
    def flood(transport):
        transport.write(wire.frame(wire.HEADERS, wire.END_HEADERS, 1, b"\x88"))
        transport.write(wire.frame(wire.DATA, 0, 1, struct.pack(">BL", 0, 1 << 30)))
        for _ in range(200):  # 3 MiB, more than the limit below
            transport.write(wire.frame(wire.DATA, 0, 1, b"\0" * 16384))

    error, took = _run(_call(flood, max_answer_bytes=1 << 20))
    assert isinstance(error, ProtocolError) and "answer over 1048576 bytes" in str(error)
    assert took < 5


def test_a_frame_over_the_size_limit_ends_the_connection():
    def oversized(transport):
        transport.write(wire.frame(wire.HEADERS, wire.END_HEADERS, 1, b"\x88"))
        transport.write(wire.FRAME_HEAD.pack((1 << 20) >> 8, 0, wire.DATA, 0, 1) + b"\0" * 4096)  # 1 MiB announced

    error, took = _run(_call(oversized))
    assert isinstance(error, ProtocolError) and "frame over 16384 bytes" in str(error)
    assert took < 5


def test_a_ping_flood_from_a_server_that_reads_nothing_ends_the_connection():
    def pings(transport):  # 17 MB of acks: more than both sockets hold, and 1 MiB more
        transport.write(wire.frame(wire.PING, 0, 0, b"12345678") * 1_000_000)

    error, _ = _run(_call(pings, deaf=True, timeout_s=25))
    assert isinstance(error, ProtocolError) and "reads none" in str(error), error


def test_header_blocks_without_end_end_the_call():
    def blocks(transport):
        transport.write(wire.frame(wire.HEADERS, wire.END_HEADERS, 1, b"\x88") * 10)

    error, _ = _run(_call(blocks))
    assert isinstance(error, ProtocolError) and "header blocks" in str(error)


class LateReader(asyncio.Protocol):
    """A busy but sound server: a large window, nothing read for ``late_s`` while it sends
    one ping, then every call answered with an empty message."""

    def __init__(self, late_s: float):
        self.late_s, self.buffer, self.encoder, self.answered = late_s, b"", hpack.Encoder(), 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(wire.settings_frame({wire.SETTINGS_INITIAL_WINDOW_SIZE: 1 << 26})
                        + wire.window_update(0, 1 << 30))
        transport.pause_reading()
        loop = asyncio.get_running_loop()
        loop.call_later(self.late_s / 2, transport.write, wire.frame(wire.PING, 0, 0, b"busy...."))
        loop.call_later(self.late_s, transport.resume_reading)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        position = len(wire.PREFACE) if self.buffer.startswith(wire.PREFACE) else 0
        while (got := wire.read_frame(self.buffer, position)) is not None:
            kind, flags, stream_id, _, position = got
            if kind == wire.DATA and flags & wire.END_STREAM:
                self._answer(stream_id)
        self.buffer = self.buffer[position:]

    def _answer(self, stream_id: int) -> None:
        headers = self.encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
        trailers = self.encoder.encode([("grpc-status", "0")])
        self.transport.write(wire.frame(wire.HEADERS, wire.END_HEADERS, stream_id, headers)
                             + wire.frame(wire.DATA, 0, stream_id, wire.GRPC_PREFIX.pack(0, 0))
                             + wire.frame(wire.HEADERS, wire.END_HEADERS | wire.END_STREAM,
                                          stream_id, trailers))
        self.answered += 1


def test_requests_a_busy_server_reads_late_are_not_taken_for_a_deaf_server():
    """32 calls of 1 MB wait unsent (more than the sockets hold) while the server reads
    nothing and pings once: the ping is answered and every call succeeds."""

    async def calls():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: LateReader(late_s=0.6), "127.0.0.1", 0)
        channel = GrpcChannel("127.0.0.1", server.sockets[0].getsockname()[1])
        try:
            return await asyncio.gather(*(channel.unary(PATH, b"x" * (1 << 20), (), 20)
                                          for _ in range(32)))
        finally:
            await channel.close()
            server.close()

    answers = _run(calls())
    assert answers == [(0, "", b"")] * 32
