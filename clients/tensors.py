"""numpy arrays <-> Open Inference Protocol tensors, for the clients.

Raw tensor bytes (the binary tensor extension, gRPC raw contents) go through the
protocol's codec (``flowserve.protocol.tensors``), here raising ``ProtocolError`` for a
response that breaks the protocol; JSON tensors are written and read here::

    >>> datatype_of(np.zeros(2, np.float32))
    'FP32'
    >>> array_from_raw(np.arange(3, dtype=np.int64).tobytes(), "INT64", [3]).tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import orjson

from flowserve.protocol.tensors import TensorCodec

from .errors import ProtocolError

RESPONSE_CODEC = TensorCodec(ProtocolError, subject="output")
datatype_of = RESPONSE_CODEC.datatype_of
array_from_raw = RESPONSE_CODEC.array_from_raw


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
    dtype = RESPONSE_CODEC.numpy_dtype(datatype)
    if datatype == "BYTES":
        array = np.empty(len(data), dtype=object)
        array[:] = [x.encode("utf-8") for x in data]
        return array.reshape(shape)
    return np.asarray(data, dtype=dtype).reshape(shape)
