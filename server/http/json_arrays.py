"""Large numeric ``data`` arrays of a JSON body, parsed in chunks into numpy arrays.

``json.loads`` makes one Python object per number (32 bytes for a float, plus a list
slot), so a 60 MB body of numbers costs close to 1 GB, and the parse holds the GIL for
seconds. Before a large body is parsed, each long ``"data": [...]`` array made only of
number characters is cut out, parsed in chunks into one numpy array (8 bytes per value;
floats by orjson, integers by numpy; the GIL is free between chunks) and replaced by a
placeholder string that ``take`` resolves::

    body, arrays = lift_numeric_arrays(body)
    header = json.loads(body)
    data = arrays.take(header["inputs"][0]["data"])     # the ndarray, or the list as it was

Arrays that are short, unbalanced, or hold anything but numbers (``true``, ``"NaN"``,
integers at or beyond the int64 limits) stay in the JSON and take the ordinary path, as
does every small body. The ``NaN`` and ``Infinity`` literals, which ``json`` reads and
Triton's clients write (perf_analyzer's random FP32 data holds hundreds), count as
numbers. Nesting is not checked here: the element count must match the shape, as for
flat data.
"""

from __future__ import annotations

import json
import re

import numpy as np
import orjson

LIFT_BODY_BYTES = 1 << 20  # bodies below this are parsed by the JSON parser alone
LIFT_ARRAY_BYTES = 1 << 16  # arrays below this stay in the JSON
CHUNK_BYTES = 1 << 20  # bytes scanned or parsed per C call (a few ms; the GIL is free between)
_PLACEHOLDER = "\0flowserve-array-"
_DATA_KEY = re.compile(rb'"data"\s*:\s*\[')
_NUMERIC_CHARS = b"0123456789eE+-.,[] \t\r\nNaInfity"  # and the letters of NaN, Infinity
_FLOAT_MARK = re.compile(rb"[.eENI]")


class LiftedArrays:
    """The arrays cut out of one body, by placeholder."""

    def __init__(self):
        self.arrays: list[np.ndarray] = []

    def add(self, array: np.ndarray) -> bytes:
        self.arrays.append(array)
        return b'"\\u0000flowserve-array-%d"' % (len(self.arrays) - 1)

    def take(self, data):
        """The array a placeholder stands for; anything else unchanged."""
        if isinstance(data, str) and data.startswith(_PLACEHOLDER):
            index = data[len(_PLACEHOLDER):]
            if index.isdigit() and int(index) < len(self.arrays):
                return self.arrays[int(index)]
        return data


def lift_numeric_arrays(body: bytes, body_bytes: int = LIFT_BODY_BYTES,
                        array_bytes: int = LIFT_ARRAY_BYTES) -> tuple[bytes, LiftedArrays]:
    """``body`` with its numeric ``data`` arrays of ``array_bytes`` or more replaced by
    placeholders; a body shorter than ``body_bytes`` is left as it is."""
    lifted, pieces, kept = LiftedArrays(), [], 0
    if len(body) < body_bytes:
        return body, lifted
    position = 0
    while (match := _DATA_KEY.search(body, position)) is not None:
        position = match.end()
        if body[match.start() - 1:match.start()] == b"\\":
            continue  # an escaped quote: the key is inside a string
        start = match.end() - 1
        end = _numeric_extent(body, start)
        long_enough = end - start >= array_bytes
        array = _parse_numbers(memoryview(body)[start:end]) if long_enough else None
        if array is not None:
            pieces += [body[kept:start], lifted.add(array)]
            kept = position = end
    return (b"".join(pieces + [body[kept:]]) if pieces else body), lifted


def _numeric_extent(body: bytes, start: int) -> int:
    """End of the run of number characters from ``start``, back to its last ``]``."""
    position = start
    while position < len(body):
        end = min(len(body), position + CHUNK_BYTES)
        others = body[position:end].translate(None, _NUMERIC_CHARS)  # faster than a search
        if others:  # the first of them is the first one of its kind
            position = body.find(others[:1], position, end)
            break
        position = end
    return body.rfind(b"]", start, position) + 1


def _parse_numbers(view: memoryview):
    """The numbers of a (possibly nested) JSON array, or None when numpy cannot be sure.

    ``view`` is parsed in chunks split at commas (each chunk holds whole numbers), one
    array per chunk, joined at the end; nothing larger than a chunk is copied as text.
    Floats are parsed by orjson and moved into numpy by ``np.fromiter`` (one pass, no
    dtype discovery); an array with no ``.``, ``e``, ``NaN`` or ``Infinity`` anywhere is
    read as integers."""
    tail = bytes(view[-64:]).rstrip(b"] \t\r\n")
    if tail.endswith(b",") or tail.endswith(b"["):
        return None
    floats = any(_FLOAT_MARK.search(bytes(view[a:b])) for a, b in _chunk_spans(view))
    parse = _parse_floats if floats else _parse_integers
    parts, depth, inner = [], 0, view[1:len(view) - 1]  # within the outer brackets
    for a, b in _chunk_spans(inner):
        chunk = bytes(inner[a:b])
        if chunk.find(b"[") >= 0 or chunk.find(b"]") >= 0:  # nested (find is memchr: fast)
            depth += chunk.count(b"[") - chunk.count(b"]")
            chunk = chunk.translate(None, b"[]")
        values = parse(chunk)
        if values is None:
            return None  # malformed: let json say where
        parts.append(values)
    if not parts or depth != 0:
        return None
    out = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if not floats and _may_have_overflowed(out):
        return None  # numpy saturates integers beyond int64; json's are exact
    return out


def _chunk_spans(view: memoryview):
    """``(start, end)`` of the chunks of ``view``, cut at the first comma past each
    ``CHUNK_BYTES``."""
    start = 0
    while start < len(view):
        end = bytes(view[start + CHUNK_BYTES:start + 2 * CHUNK_BYTES]).find(b",")
        end = len(view) if end < 0 else start + CHUNK_BYTES + end
        yield start, end
        start = end + 1


def _parse_floats(chunk: bytes):
    """The numbers of ``chunk`` (whole numbers, no brackets) as float64.

    orjson parses them, ``NaN`` read as ``null`` (which the chunk cannot hold: its letters
    are not number characters) and turned back into NaN by numpy; a chunk with
    ``Infinity``, which orjson refuses, is parsed by ``json``."""
    text = b"[%b]" % chunk
    if chunk.find(b"I") >= 0:
        try:
            values = json.loads(text)
        except ValueError:
            return None
    else:
        has_nan = chunk.find(b"N") >= 0
        try:
            values = orjson.loads(text.replace(b"NaN", b"null") if has_nan else text)
        except orjson.JSONDecodeError:
            return None
        if has_nan:
            return _floats_of(lambda: np.array(values, dtype=np.float64))
    return _floats_of(lambda: np.fromiter(values, dtype=np.float64, count=len(values)))


def _floats_of(convert):
    try:
        return convert()
    except (TypeError, ValueError, OverflowError):  # an integer too large for a float
        return None


def _parse_integers(chunk: bytes):
    """The integers of ``chunk`` (no brackets) as int64 (saturated beyond its limits)."""
    chunk = chunk.translate(None, b" \t\r\n")
    try:
        values = np.fromstring(chunk.decode("ascii"), dtype=np.int64, sep=",")
    except ValueError:
        return None
    return values if values.size == chunk.count(b",") + 1 else None


def _may_have_overflowed(values: np.ndarray) -> bool:
    info = np.iinfo(np.int64)
    return bool(values.size) and (values.max() == info.max or values.min() == info.min)
