"""Large numeric ``data`` arrays of a JSON body, parsed in chunks into numpy arrays.

``json.loads`` makes one Python object per number (32 bytes for a float, plus a list
slot), so a 60 MB body of numbers costs close to 1 GB, and the parse holds the GIL for
seconds. Before a body of 12 KiB or more is parsed, each long ``"data": [...]`` array
made only of numbers is cut out, parsed in chunks by simdjson straight into one numpy
array (its ``as_buffer`` export: 8 bytes per value, no Python object per number; the GIL
is free between chunks) and replaced by a placeholder string that ``take`` resolves::

    body, arrays = lift_numeric_arrays(body)
    header = json.loads(body)
    data = arrays.take(header["inputs"][0]["data"])     # the ndarray, or the list as it was

Arrays that are short, unbalanced, or hold anything but numbers (``true``, ``"NaN"``,
integers beyond the int64 limits, floats beyond float64's) stay in the JSON and take the
ordinary path, as does every small body. The ``NaN`` and ``Infinity`` literals, which
``json`` reads and Triton's clients write (perf_analyzer's random FP32 data holds
hundreds) but simdjson refuses, count as numbers: each is parsed as a marker value and
put back after the parse. Nesting is not checked here: the element count must match the
shape, as for flat data. Values are bit for bit what ``json.loads`` and numpy give:
simdjson rounds every decimal correctly, as Python does.
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np
import simdjson

# below these, orjson's parse into a list and numpy's copy of it cost less (interleaved
# minimums, one process: 400 floats 50 against 62 us, 784 floats 82 against 76 us)
LIFT_BODY_BYTES = 12 << 10  # bodies below this are parsed by the JSON parser alone
LIFT_ARRAY_BYTES = 8 << 10  # arrays below this stay in the JSON
CHUNK_BYTES = 1 << 20  # bytes scanned or parsed per C call (a few ms; the GIL is free between)
_PLACEHOLDER = "\0flowserve-array-"
_DATA_KEY = re.compile(rb'"data"\s*:\s*\[')
_NUMERIC_CHARS = b"0123456789eE+-.,[] \t\r\nNaInfity"  # and the letters of NaN, Infinity
# what simdjson reads in place of the literals it refuses (any value would do: a marker
# also written as a number fails the count check below and the array stays in the JSON)
_NAN_MARK, _INFINITY_MARK = b"1.0625e-300", b"1.1875e-300"
_NAN_VALUE, _INFINITY_VALUE = float(_NAN_MARK), float(_INFINITY_MARK)
_BRACKETS_TO_SPACES = bytes.maketrans(b"[]", b"  ")  # 1,2],[3 -> 1,2 , 3 but 1,2][3 -> no JSON


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
    parser = simdjson.Parser()  # one per body: a parser serves one thread at a time
    position = 0
    while (match := _DATA_KEY.search(body, position)) is not None:
        position = match.end()
        if body[match.start() - 1:match.start()] == b"\\":
            continue  # an escaped quote: the key is inside a string
        start = match.end() - 1
        end = _array_end(body, start)
        if end - start < array_bytes or body[start:min(end, start + 4096)].translate(
                None, _NUMERIC_CHARS):
            continue  # short, or strings, true, null: not a numeric array
        array = _parse_numbers(body, start, end, parser)
        if array is not None:
            pieces += [body[kept:start], lifted.add(array)]
            kept = position = end
    return (b"".join(pieces + [body[kept:]]) if pieces else body), lifted


def _array_end(body: bytes, start: int) -> int:
    """End of the array at ``start`` if it holds numbers only: just past its first ``]``
    when no ``[`` comes before it (a flat array; both found by memchr), else past the
    last ``]`` of the run of number characters from ``start``. What is between is
    checked by the parse."""
    close = body.find(b"]", start)
    if close >= 0 and body.find(b"[", start + 1, close) < 0:
        return close + 1
    return _numeric_extent(body, start)


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


def _parse_numbers(body: bytes, start: int, end: int,
                   parser: simdjson.Parser) -> Optional[np.ndarray]:
    """The numbers of the (possibly nested) JSON array ``body[start:end]``, or None when
    they are not exactly what ``json`` would read (malformed, or beyond what int64 or
    float64 hold).

    The array is parsed in chunks split at commas (each chunk holds whole numbers), one
    array per chunk, joined at the end; nothing larger than a chunk is copied as text.
    A chunk of integers only is read as int64, any other as float64 (an array of both
    becomes float64, as numpy makes it from ``json``'s list). The brackets of a nested
    array become spaces, so that only commas separate numbers, and must balance."""
    tail = body[max(start, end - 64):end].rstrip(b"] \t\r\n")
    if tail.endswith(b",") or tail.endswith(b"["):
        return None  # a trailing comma a chunk's cut would drop
    parts, depth, view = [], 0, memoryview(body)
    for a, b in _chunk_spans(body, start + 1, end - 1):  # within the outer brackets
        text = b"[%b]" % view[a:b]
        if text.find(b"[", 1) >= 0 or text.find(b"]", 0, -1) >= 0:  # nested (memchr: fast)
            inner = text[1:-1]
            depth += inner.count(b"[") - inner.count(b"]")
            text = b"[%b]" % inner.translate(_BRACKETS_TO_SPACES)
        values = _parse_chunk(text, parser)
        if values is None:
            return None  # let json read it, or say where it is malformed
        parts.append(values)
    if not parts or depth != 0:
        return None
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _chunk_spans(body: bytes, start: int, end: int):
    """``(start, end)`` of the chunks of ``body[start:end]``, cut at the first comma past
    each ``CHUNK_BYTES``."""
    while start < end:
        comma = body.find(b",", start + CHUNK_BYTES, end)
        cut = end if comma < 0 else comma
        yield start, cut
        start = cut + 1


def _parse_chunk(text: bytes, parser: simdjson.Parser) -> Optional[np.ndarray]:
    """The numbers of the flat JSON array ``text``, as int64 or float64.

    ``NaN`` and ``Infinity`` are parsed as marker values, then set back: the count of
    each marker found must be the count of literals replaced, so a marker value also
    written as a number (or a literal glued to a number) leaves the chunk to ``json``."""
    if text.find(b"N") < 0 and text.find(b"I") < 0:
        return _exported(text, parser)
    text, nans = _replaced(text, b"NaN", _NAN_MARK)
    text, infinities = _replaced(text, b"Infinity", _INFINITY_MARK)  # -Infinity: -marker
    values = _exported(text, parser)  # float64: the markers have exponents
    if values is None:
        return None
    nan_at = values == _NAN_VALUE
    plus_at, minus_at = values == _INFINITY_VALUE, values == -_INFINITY_VALUE
    if np.count_nonzero(nan_at) != nans or np.count_nonzero(plus_at | minus_at) != infinities:
        return None
    values[nan_at], values[plus_at], values[minus_at] = np.nan, np.inf, -np.inf
    return values


def _replaced(text: bytes, literal: bytes, mark: bytes) -> tuple[bytes, int]:
    """``text`` with each ``literal`` replaced by ``mark``, and how many were. Found by
    their first letter (memchr), which numbers do not hold: ~50x faster than
    ``bytes.replace`` on a chunk of floats. Other words with that letter stay (and make
    the parse fail)."""
    pieces, kept, letter = [], 0, literal[:1]
    at = text.find(letter)
    while at >= 0:
        if text.startswith(literal, at):
            pieces += [text[kept:at], mark]
            kept = at + len(literal)
        at = text.find(letter, at + 1)
    if not pieces:
        return text, 0
    pieces.append(text[kept:])
    return b"".join(pieces), len(pieces) // 2


def _exported(text: bytes, parser: simdjson.Parser) -> Optional[np.ndarray]:
    """The numbers of the JSON array ``text`` from simdjson's typed export, or None:
    float64 where a number has a fraction or an exponent, else int64 (found by memchr;
    trying int64 first and failing costs more than the parse of a short array)."""
    floats = text.find(b".") >= 0 or text.find(b"e") >= 0 or text.find(b"E") >= 0
    try:
        document = parser.parse(text)
    except (ValueError, RuntimeError):  # malformed, a float beyond float64, an integer
        return None                     # beyond 64 bits: json reads it or says where
    try:
        return _buffer_of(document, floats)
    finally:
        del document  # the parser parses again only once its last document is let go


def _buffer_of(document, floats: bool) -> Optional[np.ndarray]:
    try:
        if floats:
            return np.frombuffer(document.as_buffer(of_type="d"), np.float64)
        return np.frombuffer(document.as_buffer(of_type="i"), np.int64)
    except (TypeError, ValueError):  # true, null, a string; an integer beyond int64,
        return None                    # which json's exact integers decide
