"""gRPC over HTTP/2, the parts above the frames: status codes, header blocks, the
length-prefixed messages, compression and deadlines (gRPC's PROTOCOL-HTTP2.md).

Header blocks are written as HPACK literals that index nothing, so they are constants
(or nearly) and need no per-connection encoder::

    stream.respond(RESPONSE_HEADERS, frame_message(payload), OK_TRAILERS)
    stream.send_trailers(error_trailers(Status.NOT_FOUND, "model 'm': not found"))
"""

from __future__ import annotations

import enum
import types
from typing import Optional

from flowserve.clients.http2_wire import GRPC_PREFIX

from .compression import ENCODINGS, InflateError, InflateLimitError, deflate, inflate

ACCEPTED_ENCODINGS = ("identity", *ENCODINGS)
# read-only lookup table: a grpc-timeout unit's seconds
_TIMEOUT_UNITS = types.MappingProxyType({"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9})


class Status(enum.IntEnum):
    """gRPC status codes (grpc/doc/statuscodes.md)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


class WireError(Exception):
    """A request the gRPC layer refuses before the data plane sees it."""

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status = status


def _integer(value: int, prefix_bits: int = 7, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541, 5.1) with ``first``'s high bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out, value = [first | limit], value - limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: str, value: str | bytes) -> bytes:
    """A header field as an HPACK literal that is not indexed (no table state)."""
    raw_name = name.encode("ascii")
    raw_value = value.encode("ascii") if isinstance(value, str) else value
    return (b"\x00" + _integer(len(raw_name)) + raw_name
            + _integer(len(raw_value)) + raw_value)


def status_header(code: int) -> bytes:
    """``:status`` (index 8 of the static table is ``:status 200``)."""
    if code == 200:
        return b"\x88"
    value = str(code).encode()
    return _integer(8, 4) + _integer(len(value)) + value


_CONTENT_TYPE = literal("content-type", "application/grpc")
_ACCEPT = literal("grpc-accept-encoding", ",".join(ACCEPTED_ENCODINGS))
RESPONSE_HEADERS = status_header(200) + _CONTENT_TYPE + _ACCEPT
# read-only: the response headers of a call whose messages may come compressed, by encoding
ENCODED_RESPONSE_HEADERS = types.MappingProxyType(
    {name: RESPONSE_HEADERS + literal("grpc-encoding", name) for name in ENCODINGS})
OK_TRAILERS = literal("grpc-status", "0")


def _percent_encoded(message: str) -> bytes:
    """grpc-message's encoding: printable ASCII but ``%`` as is, the rest as %XX."""
    return b"".join(bytes([b]) if 0x20 <= b <= 0x7E and b != 0x25 else b"%%%02X" % b
                    for b in message.encode("utf-8"))


def error_trailers(status: Status, message: str) -> bytes:
    return literal("grpc-status", str(int(status))) + literal("grpc-message",
                                                             _percent_encoded(message))


def trailers_only(status: Status, message: str) -> bytes:
    """A whole error response in one header block (no messages were sent)."""
    return RESPONSE_HEADERS + error_trailers(status, message)


def http_refusal(code: int, message: str) -> bytes:
    """An HTTP-level refusal of a request that is not gRPC (wrong method or type)."""
    return (status_header(code) + literal("content-type", "text/plain")
            + literal("grpc-status", str(int(Status.UNKNOWN)))
            + literal("grpc-message", _percent_encoded(message)))


def frame_message(payload: bytes, encoding: Optional[str] = None, level: int = 0) -> bytes:
    """One length-prefixed message, compressed with ``encoding`` at zlib ``level`` if given."""
    if encoding is None:
        return GRPC_PREFIX.pack(0, len(payload)) + payload
    payload = deflate(payload, encoding, level)
    return GRPC_PREFIX.pack(1, len(payload)) + payload


def _check_message_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise WireError(Status.RESOURCE_EXHAUSTED, f"a request message of {size} bytes; at most "
                        f"{max_bytes} accepted (--max-request-bytes)")


def check_announced_size(buffer: bytearray, max_bytes: int) -> None:
    """Refuse a message over ``max_bytes`` as soon as its length prefix is here, and a
    unary call's body once it holds more than one message could."""
    if len(buffer) >= 5:
        _check_message_size(GRPC_PREFIX.unpack_from(buffer)[1], max_bytes)
    if len(buffer) > max_bytes + 5:
        raise WireError(Status.RESOURCE_EXHAUSTED, f"a request body over {max_bytes} bytes "
                        "(--max-request-bytes)")


def next_message(buffer: bytearray, max_bytes: int,
                 encoding: Optional[str]) -> Optional[bytes]:
    """Take one whole message from the front of ``buffer`` (None: not all here yet)."""
    if len(buffer) < 5:
        return None
    compressed, size = GRPC_PREFIX.unpack_from(buffer)
    _check_message_size(size, max_bytes)
    if len(buffer) < 5 + size:
        return None
    with memoryview(buffer) as view:  # one copy (a slice of the bytearray would be another)
        payload = bytes(view[5:5 + size])
    del buffer[:5 + size]
    if compressed:
        return _decompress(payload, encoding, max_bytes)
    return payload


def _decompress(payload: bytes, encoding: Optional[str], max_bytes: int) -> bytes:
    if encoding not in ENCODINGS:
        raise WireError(Status.INTERNAL, "a compressed message without a grpc-encoding "
                        f"this server knows (given {encoding!r})")
    try:
        return inflate(payload, encoding, max_bytes)
    except InflateLimitError:
        raise WireError(Status.RESOURCE_EXHAUSTED, f"a request message inflating past "
                        f"{max_bytes} bytes (--max-request-bytes)") from None
    except InflateError as exc:
        raise WireError(Status.INTERNAL, f"a message of {exc}") from None


def check_encoding(headers: dict) -> Optional[str]:
    encoding = headers.get("grpc-encoding")
    if encoding is not None and encoding not in ACCEPTED_ENCODINGS:
        raise WireError(Status.UNIMPLEMENTED, f"grpc-encoding {encoding!r}: this server "
                        f"accepts {', '.join(ACCEPTED_ENCODINGS)}")
    return encoding


def timeout_seconds(headers: dict) -> Optional[float]:
    """The call's deadline from ``grpc-timeout`` (``1S``, ``250m``...), or None."""
    value = headers.get("grpc-timeout")
    if value is None:
        return None
    digits, unit = value[:-1], value[-1:]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 8 or unit not in _TIMEOUT_UNITS:
        raise WireError(Status.INVALID_ARGUMENT, f"grpc-timeout {value!r}: expected up to "
                        "8 digits and a unit of H, M, S, m, u or n")
    return int(digits) * _TIMEOUT_UNITS[unit]
