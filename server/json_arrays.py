"""Large numeric ``data`` arrays of a JSON body, parsed by numpy instead of ``json``.

``json.loads`` makes one Python object per number (32 bytes for a float, plus a list
slot), so a 60 MB body of numbers costs close to 1 GB, and the parse holds the GIL for
seconds. Before a large body is parsed, each long ``"data": [...]`` array made only of
number characters is cut out, parsed by numpy in chunks (8 bytes per value; the GIL is
free between chunks) and replaced by a placeholder string that ``take`` resolves::

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

LIFT_BODY_BYTES = 1 << 20  # bodies below this are parsed by json alone
LIFT_ARRAY_BYTES = 1 << 16  # arrays below this stay in the JSON
CHUNK_BYTES = 1 << 20  # numbers parsed per numpy call (a few ms; the GIL is free between)
_PLACEHOLDER = "\0flowserve-array-"
_NUMERIC_DATA = re.compile(rb'(?<!\\)"data"\s*:\s*(\[[0-9eE+\-.,\s\[\]]*\])')
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
    lifted = LiftedArrays()
    if len(body) < LIFT_BODY_BYTES:
        return body, lifted

    def lift(match: re.Match) -> bytes:
        start, end = match.span(1)
        if end - start < LIFT_ARRAY_BYTES:
            return match.group(0)
        array = _parse_numbers(match.group(1))
        if array is None:
            return match.group(0)
        return body[match.start():start] + lifted.add(array)

    return _NUMERIC_DATA.sub(lift, body), lifted


def _parse_numbers(text: bytes):
    """The numbers of a (possibly nested) JSON array, or None when numpy cannot be sure."""
    if text.count(b"[") != text.count(b"]"):
        return None
    flat = text.translate(None, b"[] \t\r\n")
    if not flat:
        return None
    dtype = np.float64 if _FLOAT_MARK.search(flat) else np.int64
    out = np.empty(flat.count(b",") + 1, dtype)
    filled, start = 0, 0
    while start < len(flat):
        end = flat.find(b",", start + CHUNK_BYTES)
        end = len(flat) if end < 0 else end
        chunk = flat[start:end]
        try:
            values = np.fromstring(chunk.decode("ascii"), dtype=dtype, sep=",")
        except ValueError:
            return None  # malformed: let json say where
        if values.size != chunk.count(b",") + 1 or filled + values.size > out.size:
            return None
        out[filled:filled + values.size] = values
        filled, start = filled + values.size, end + 1
    if filled != out.size or flat.endswith(b","):
        return None
    if dtype == np.int64 and _may_have_overflowed(out):
        return None  # numpy saturates integers beyond int64; json's are exact
    return out


def _may_have_overflowed(values: np.ndarray) -> bool:
    info = np.iinfo(np.int64)
    return bool(values.size) and (values.max() == info.max or values.min() == info.min)
