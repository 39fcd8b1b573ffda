"""HTTP/2 as gRPC uses it, the facts both ends share (RFC 9113): the connection preface,
frame types, flags, error codes, settings, and how a frame is laid out::

    frame(HEADERS, END_HEADERS, 1, block)   # one frame, header and payload
    size = frame_size(buffer)               # the payload length of the frame at the front

The clients' gRPC channel (``_grpc_channel``) is written on these (the server runs
grpcio's own HTTP/2).
"""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 5, 6, 7, 8, 9
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS = 1, 2, 3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE = 4, 5, 6
DEFAULT_WINDOW, DEFAULT_FRAME_BYTES, MAX_WINDOW = 65_535, 16_384, 2**31 - 1

FRAME_HEAD = struct.Struct(">HBBBL")  # length (24 bits, as 16 + 8), type, flags, stream id
SETTING = struct.Struct(">HL")
U32 = struct.Struct(">L")
GRPC_PREFIX = struct.Struct(">BL")  # a gRPC message's compressed flag and length


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame, header and payload."""
    size = len(payload)
    return FRAME_HEAD.pack(size >> 8, size & 0xFF, kind, flags, stream_id) + payload


def settings_frame(values: dict) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(SETTING.pack(k, v) for k, v in values.items()))


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, U32.pack(increment))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, U32.pack(code))


def goaway(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, U32.pack(last_stream_id) + U32.pack(code) + debug)


def frame_header(buffer, position: int) -> tuple[int, int, int, int]:
    """(payload length, type, flags, stream id) of the frame header at ``position``; the
    buffer must hold its 9 bytes."""
    high, low, kind, flags, stream_id = FRAME_HEAD.unpack_from(buffer, position)
    return high << 8 | low, kind, flags, stream_id & MAX_WINDOW


def read_frame(buffer, position: int):
    """(type, flags, stream id, payload start, payload end) of the frame at ``position``
    of ``buffer``, or None while it is incomplete."""
    if len(buffer) - position < 9:
        return None
    size, kind, flags, stream_id = frame_header(buffer, position)
    end = position + 9 + size
    if end > len(buffer):
        return None
    return kind, flags, stream_id, position + 9, end
