"""numpy arrays <-> Open Inference Protocol tensors, for the clients.

The binary tensor extension and gRPC raw contents carry little-endian bytes;
BYTES tensors carry each element as a 4-byte length and the bytes::

    >>> datatype_of(np.zeros(2, np.float32))
    'FP32'
    >>> array_from_raw(array_to_raw(np.arange(3, dtype=np.int64)), "INT64", [3]).tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import orjson

from .errors import ProtocolError

NUMPY_BY_DATATYPE = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "BYTES": np.dtype(object),
}
_DATATYPE_BY_NUMPY = {v: k for k, v in NUMPY_BY_DATATYPE.items()}
_LENGTH = struct.Struct("<I")


def datatype_of(array: np.ndarray) -> str:
    """Protocol datatype of ``array`` (str/bytes/object arrays are BYTES)."""
    if array.dtype.kind in "OSU":
        return "BYTES"
    try:
        return _DATATYPE_BY_NUMPY[array.dtype]
    except KeyError:
        raise ProtocolError(f"arrays of dtype {array.dtype} have no protocol datatype") from None


def array_to_raw(array: np.ndarray) -> bytes:
    """Raw bytes of ``array`` (BYTES: a 4-byte little-endian length before each)."""
    if array.dtype.kind in "OSU":
        parts = []
        for item in array.reshape(-1):
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts += [_LENGTH.pack(len(data)), data]
        return b"".join(parts)
    return np.ascontiguousarray(array).tobytes()


def raw_view(array: np.ndarray):
    """The raw bytes of ``array`` as ``array_to_raw`` gives them, but without a copy where
    it is a contiguous numeric array: a flat byte view of its memory."""
    if array.dtype.kind in "OSU" or not array.flags.c_contiguous:
        return array_to_raw(array)
    return memoryview(array.reshape(-1).view(np.uint8))


def array_from_raw(raw, datatype: str, shape: list) -> np.ndarray:
    """Array of ``shape`` and ``datatype`` from raw bytes."""
    if datatype not in NUMPY_BY_DATATYPE:
        raise ProtocolError(f"unknown datatype {datatype!r} in the response")
    if datatype == "BYTES":
        items, offset, view = [], 0, memoryview(raw)
        while offset < len(view):
            (length,) = _LENGTH.unpack_from(view, offset)
            items.append(bytes(view[offset + 4 : offset + 4 + length]))
            offset += 4 + length
        array = np.empty(len(items), dtype=object)
        array[:] = items
        return array.reshape(shape)
    return np.frombuffer(raw, dtype=NUMPY_BY_DATATYPE[datatype]).reshape(shape)


def array_to_json(array: np.ndarray) -> list:
    """Flat row-major JSON list of ``array``."""
    flat = array.reshape(-1)
    if array.dtype.kind in "OSU":
        return [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in flat]
    if array.dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        flat = flat.astype(np.float32)
    return flat.tolist()


def json_list_text(array: np.ndarray) -> str:
    """The JSON text of ``array_to_json(array)``, numbers written by orjson.

    Floats of every width are written as the shortest text of their float64 value, which
    reads back exactly (through float64, as servers read them); orjson writes 150k of
    them about 10x faster than ``"%.9g"`` formatting did.

    >>> json_list_text(np.array([0.1, -2.5], np.float32))
    '[0.10000000149011612,-2.5]'
    """
    flat = np.asarray(array).reshape(-1)
    if flat.dtype in _FLOATS or flat.dtype.kind == "f":
        flat = flat.astype(np.float64, copy=False)
        if not np.isfinite(flat).all():  # orjson would write null: json writes NaN, Infinity
            return json.dumps(flat.tolist(), separators=(",", ":"))
    if flat.dtype.kind in "biuf" and flat.dtype.isnative:
        return orjson.dumps(np.ascontiguousarray(flat), option=orjson.OPT_SERIALIZE_NUMPY).decode()
    return json.dumps(array_to_json(array), separators=(",", ":"))


_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def loads(text: bytes):
    """``json.loads`` of ``text``, by orjson where it can (not NaN, Infinity, lone surrogates)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def array_from_json(data: list, datatype: str, shape: list) -> np.ndarray:
    """Array of ``shape`` from a JSON ``data`` list."""
    if datatype not in NUMPY_BY_DATATYPE:
        raise ProtocolError(f"unknown datatype {datatype!r} in the response")
    if datatype == "BYTES":
        array = np.empty(len(data), dtype=object)
        array[:] = [x.encode("utf-8") for x in data]
        return array.reshape(shape)
    return np.asarray(data, dtype=NUMPY_BY_DATATYPE[datatype]).reshape(shape)
