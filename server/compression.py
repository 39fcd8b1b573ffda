"""gzip and deflate bodies, for both front ends: what a request carries is inflated under
a size bound (no request grows past ``--max-request-bytes`` once inflated, whatever its
ratio), and an answer is deflated when the client accepts it (HTTP ``Accept-Encoding``,
gRPC ``grpc-accept-encoding``). "deflate" is the zlib format in both protocols::

    body = inflate(payload, "gzip", max_bytes)          # InflateError, InflateLimitError
    encoding = preferred_encoding("gzip;q=0.5, deflate")  # "deflate"
    payload = deflate(body, encoding, LEVELS["low"])
"""

from __future__ import annotations

import types
import zlib
from typing import Optional

ENCODINGS = ("gzip", "deflate")
# read-only lookup tables: each encoding's zlib window; Triton's compression level names
_WBITS = types.MappingProxyType({"deflate": zlib.MAX_WBITS, "gzip": 16 + zlib.MAX_WBITS})
LEVELS = types.MappingProxyType({"none": 0, "low": 1, "medium": 6, "high": 9})
# answers below DEFLATE_MIN_BYTES go as they are (compressing them would not pay); above
# DEFLATE_INLINE_BYTES they are compressed off the event loop
DEFLATE_MIN_BYTES, DEFLATE_INLINE_BYTES = 1024, 64 * 1024


class InflateError(ValueError):
    """A body that does not inflate with its declared encoding."""


class InflateLimitError(InflateError):
    """A body that inflates past the size bound."""


def inflate(payload: bytes, encoding: str, max_bytes: int) -> bytes:
    """``payload`` inflated with ``encoding`` (one of ``ENCODINGS``), at most ``max_bytes``."""
    inflater = zlib.decompressobj(_WBITS[encoding])
    try:
        data = inflater.decompress(payload, max_bytes + 1)
    except zlib.error as exc:
        raise InflateError(f"{encoding} data that does not inflate: {exc}") from None
    if len(data) > max_bytes or inflater.unconsumed_tail:
        raise InflateLimitError(f"inflates past {max_bytes} bytes")
    if not inflater.eof:
        raise InflateError(f"{encoding} data that ends before its end marker")
    return data


def deflate(data, encoding: str, level: int) -> bytes:
    """``data`` (bytes-like) compressed with ``encoding`` at zlib ``level`` (1-9)."""
    deflater = zlib.compressobj(level, zlib.DEFLATED, _WBITS[encoding])
    return deflater.compress(data) + deflater.flush()


def preferred_encoding(accepted: Optional[str]) -> Optional[str]:
    """The encoding of ``ENCODINGS`` a client's accept list (``"gzip, deflate;q=0.5"``)
    ranks highest, gzip on a tie; None when it accepts neither (``q=0`` refuses one)."""
    if not accepted:
        return None
    best, best_q = None, 0.0
    for item in accepted.split(","):
        name, _, parameters = item.partition(";")
        name = name.strip().lower()
        name = "gzip" if name == "*" else name  # any coding: gzip
        if name not in ENCODINGS:
            continue
        quality = 1.0
        key, _, value = parameters.strip().partition("=")
        if key.strip().lower() == "q":
            try:
                quality = float(value)
            except ValueError:
                quality = 0.0
        if quality > best_q or (quality == best_q and quality > 0 and name == "gzip"):
            best, best_q = name, quality
    return best
