"""Open Inference Protocol datatypes and their numpy, ONNX and flowserve names.

The protocol names tensors' element types with strings (``"FP32"``, ``"BYTES"``,
``"BF16"``); this module is the one table between those names, numpy dtypes,
ONNX ``TensorProto`` element types and flowserve's dtype names, plus the
conversions of raw little-endian bytes (the binary tensor extension and gRPC
``raw_input_contents``) to arrays and back::

    >>> array_from_raw(b"\\x00\\x00\\x80?", "FP32", [1]).tolist()
    [1.0]
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
from onnx import TensorProto

from flowserve.clients.tensors import NUMPY_BY_DATATYPE  # the protocol's one table

from .errors import InvalidRequestError

DATATYPE_BY_NUMPY = {v: k for k, v in NUMPY_BY_DATATYPE.items()}

DATATYPE_BY_ONNX = {
    TensorProto.BOOL: "BOOL",
    TensorProto.UINT8: "UINT8",
    TensorProto.UINT16: "UINT16",
    TensorProto.UINT32: "UINT32",
    TensorProto.UINT64: "UINT64",
    TensorProto.INT8: "INT8",
    TensorProto.INT16: "INT16",
    TensorProto.INT32: "INT32",
    TensorProto.INT64: "INT64",
    TensorProto.FLOAT16: "FP16",
    TensorProto.FLOAT: "FP32",
    TensorProto.DOUBLE: "FP64",
    TensorProto.BFLOAT16: "BF16",
    TensorProto.STRING: "BYTES",
}

DATATYPE_BY_FLOWSERVE = {
    "float32": "FP32",
    "float16": "FP16",
    "bfloat16": "BF16",
    "float64": "FP64",
    "int64": "INT64",
    "int32": "INT32",
    "int8": "INT8",
    "uint8": "UINT8",
    "bool": "BOOL",
}

# Triton's model_config DataType enum names, for the /config endpoint.
TRITON_TYPE_BY_DATATYPE = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BYTES": "TYPE_STRING",
    "BF16": "TYPE_BF16",
}

_LENGTH = struct.Struct("<I")


def numpy_dtype(datatype: str, where: str) -> np.dtype:
    """numpy dtype of protocol ``datatype``; ``where`` names the field in errors."""
    try:
        return NUMPY_BY_DATATYPE[datatype]
    except (KeyError, TypeError):
        known = ", ".join(NUMPY_BY_DATATYPE)
        raise InvalidRequestError(
            f"{where}: unknown datatype {datatype!r}; expected one of {known}"
        ) from None


MAX_DIMS = 32  # numpy holds 64; no served model has more than a handful
MAX_DIM = 2**31 - 1


def element_count(shape: list[int], where: str) -> int:
    """Number of elements of ``shape``, refusing negative, non-integer or huge dims."""
    if len(shape) > MAX_DIMS:
        raise InvalidRequestError(f"{where}: shape has {len(shape)} dims, at most {MAX_DIMS} "
                                  "are accepted")
    count = 1
    for dim in shape:
        if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim <= MAX_DIM:
            raise InvalidRequestError(
                f"{where}: shape {str(shape)[:120]} must be a list of non-negative integers "
                f"of at most {MAX_DIM}"
            )
        count *= dim
    return count


DEFAULT_MAX_BYTES_ELEMENTS = 1 << 20
# requests and responses above this size are decoded/encoded in a worker thread, so the
# event loop keeps answering (health checks, small requests); below it the hop costs more
OFFLOAD_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class DecodeLimits:
    """What one request may make the server build, checked before it is built."""

    max_bytes_elements: int = DEFAULT_MAX_BYTES_ELEMENTS  # each becomes a Python bytes object
    max_json_elements: int = 1 << 24  # values in a JSON body (numbers, strings)


def check_bytes_elements(count: int, limit: int, where: str) -> None:
    """Refuse a BYTES tensor of more than ``limit`` elements (each is a Python object)."""
    if count > limit:
        raise InvalidRequestError(f"{where}: {count} BYTES elements exceed the limit of {limit} "
                                  "(--max-bytes-elements)")


def array_from_raw(raw, datatype: str, shape: list[int], where: str = "input",
                   max_bytes_elements: int = DEFAULT_MAX_BYTES_ELEMENTS) -> np.ndarray:
    """Array of ``shape`` from little-endian ``raw`` bytes (BYTES: length-prefixed).

    ``raw`` is any bytes-like object; the array shares its memory (no copy) unless it
    starts at an address that is no multiple of the element size, where it is copied:
    kernels may assume aligned elements."""
    dtype = numpy_dtype(datatype, where)
    count = element_count(shape, where)
    if datatype == "BYTES":
        check_bytes_elements(count, max_bytes_elements, where)
        return _bytes_array_from_raw(raw, count, where).reshape(shape)
    expected = count * dtype.itemsize
    if len(raw) != expected:
        raise InvalidRequestError(
            f"{where}: got {len(raw)} bytes of data, expected {expected} "
            f"for shape {shape} of {datatype}"
        )
    array = np.frombuffer(raw, dtype=dtype)
    return (array if array.flags.aligned else array.copy()).reshape(shape)


def _bytes_array_from_raw(raw: bytes, count: int, where: str) -> np.ndarray:
    items, offset, view = [], 0, memoryview(raw)
    while offset < len(raw):
        if len(items) == count:
            raise InvalidRequestError(f"{where}: more than {count} BYTES elements in the data")
        if offset + 4 > len(raw):
            raise InvalidRequestError(f"{where}: BYTES data ends inside a length prefix")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > len(raw):
            raise InvalidRequestError(f"{where}: BYTES element runs past the end of the data")
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if len(items) != count:
        raise InvalidRequestError(f"{where}: got {len(items)} BYTES elements, expected {count}")
    array = np.empty(count, dtype=object)
    array[:] = items
    return array


def array_to_raw(array: np.ndarray) -> bytes:
    """Raw bytes of ``array`` in host (little-endian) order; BYTES: 4-byte length + data."""
    if array.dtype == object:
        parts = []
        for item in array.reshape(-1):
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts.append(_LENGTH.pack(len(data)))
            parts.append(data)
        return b"".join(parts)
    return np.ascontiguousarray(array).tobytes()


def datatype_of(array: np.ndarray) -> str:
    """Protocol datatype of a numpy array (``str``/``bytes`` arrays are BYTES)."""
    if array.dtype.kind in "OSU":
        return "BYTES"
    try:
        return DATATYPE_BY_NUMPY[array.dtype]
    except KeyError:
        raise InvalidRequestError(f"arrays of dtype {array.dtype} have no protocol datatype") from None
