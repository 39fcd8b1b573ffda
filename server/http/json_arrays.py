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

Arrays that are short, unbalanced, or hold anything but plain numbers (``true``,
``"NaN"``, integers at or beyond the int64 limits) stay in the JSON and take the ordinary
path, as does every small body. Nesting is not checked here: the element count must
match the shape, as for flat data.
"""

from __future__ import annotations

import re

import numpy as np
import orjson

LIFT_BODY_BYTES = 1 << 20  # bodies below this are parsed by the JSON parser alone
LIFT_ARRAY_BYTES = 1 << 16  # arrays below this stay in the JSON
CHUNK_BYTES = 1 << 20  # bytes scanned or parsed per C call (a few ms; the GIL is free between)
_PLACEHOLDER = "\0flowserve-array-"
_DATA_KEY = re.compile(rb'"data"\s*:\s*\[')
_NUMERIC_CHARS = b"0123456789eE+-.,[] \t\r\n"
_FLOAT_MARK = re.compile(rb"[.eE]")


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


def lift_numeric_arrays(body: bytes) -> tuple[bytes, LiftedArrays]:
    """``body`` with its long numeric ``data`` arrays replaced by placeholders."""
    lifted, pieces, kept = LiftedArrays(), [], 0
    if len(body) < LIFT_BODY_BYTES:
        return body, lifted
    position = 0
    while (match := _DATA_KEY.search(body, position)) is not None:
        position = match.end()
        if body[match.start() - 1:match.start()] == b"\\":
            continue  # an escaped quote: the key is inside a string
        start = match.end() - 1
        end = _numeric_extent(body, start)
        long_enough = end - start >= LIFT_ARRAY_BYTES
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

    Two passes over ``view`` in chunks split at commas (each chunk holds whole numbers):
    the first counts values and brackets and finds the dtype, the second parses into one
    preallocated array; nothing larger than a chunk is copied."""
    spans, start = [], 0
    while start < len(view):
        end = bytes(view[start + CHUNK_BYTES:start + 2 * CHUNK_BYTES]).find(b",")
        end = len(view) if end < 0 else start + CHUNK_BYTES + end
        spans.append((start, end))
        start = end + 1
    commas = opened = closed = 0
    floats = False
    for a, b in spans:
        chunk = bytes(view[a:b])
        commas, opened, closed = (commas + chunk.count(b","), opened + chunk.count(b"["),
                                  closed + chunk.count(b"]"))
        floats = floats or _FLOAT_MARK.search(chunk) is not None
    tail = bytes(view[-64:]).rstrip(b"] \t\r\n")
    if not spans or opened != closed or tail.endswith(b",") or tail.endswith(b"["):
        return None
    dtype = np.float64 if floats else np.int64
    out, filled = np.empty(commas + len(spans), dtype), 0
    parse = _parse_floats if floats else _parse_integers
    for a, b in spans:
        values = parse(bytes(view[a:b]))
        if values is None or filled + len(values) > out.size:
            return None  # malformed: let json say where
        out[filled:filled + len(values)] = values
        filled += len(values)
    if filled != out.size or (dtype == np.int64 and _may_have_overflowed(out)):
        return None  # numpy saturates integers beyond int64; json's are exact
    return out


def _parse_floats(chunk: bytes):
    """The numbers of ``chunk`` (whole numbers, brackets anywhere) as a list, by orjson."""
    try:
        return orjson.loads(b"[%b]" % chunk.translate(None, b"[]"))
    except orjson.JSONDecodeError:
        return None


def _parse_integers(chunk: bytes):
    """The integers of ``chunk`` as int64 (saturated beyond its limits), by numpy."""
    chunk = chunk.translate(None, b"[] \t\r\n")
    try:
        values = np.fromstring(chunk.decode("ascii"), dtype=np.int64, sep=",")
    except ValueError:
        return None
    return values if values.size == chunk.count(b",") + 1 else None


def _may_have_overflowed(values: np.ndarray) -> bool:
    info = np.iinfo(np.int64)
    return bool(values.size) and (values.max() == info.max or values.min() == info.min)
