"""numpy arrays <-> the raw tensor bytes of the Open Inference Protocol.

The binary tensor extension (HTTP) and gRPC's ``raw_input_contents`` /
``raw_output_contents`` carry each tensor as little-endian bytes, row-major; BYTES
tensors carry each element as a 4-byte little-endian length and the bytes. Encoding
cannot fail; decoding checks what it is given, and a ``TensorCodec`` raises its
caller's exception class (the server's ``InvalidRequestError``, the clients'
``ProtocolError``) with messages that name the tensor::

    >>> codec = TensorCodec(ValueError)
    >>> codec.array_from_raw(array_to_raw(np.arange(3, dtype=np.int64)), "INT64", [3]).tolist()
    [0, 1, 2]
    >>> codec.datatype_of(np.zeros(2, np.float32))
    'FP32'
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Optional

import numpy as np

from flowserve.protocol.datatypes import DATATYPE_BY_NUMPY, NUMPY_BY_DATATYPE

LENGTH = struct.Struct("<I")  # the length before each BYTES element
MAX_DIMS = 32  # numpy holds 64; no served model has more than a handful
MAX_DIM = 2**31 - 1


def array_to_raw(array: np.ndarray) -> bytes:
    """Raw bytes of ``array`` in host (little-endian) order; BYTES (``str``/``bytes``/object
    arrays): a 4-byte length before each element's bytes (``str`` as UTF-8)."""
    if array.dtype.kind in "OSU":
        parts = []
        for item in array.reshape(-1):
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts += [LENGTH.pack(len(data)), data]
        return b"".join(parts)
    return np.ascontiguousarray(array).tobytes()


def raw_view(array: np.ndarray):
    """The raw bytes of ``array`` as ``array_to_raw`` gives them, but without a copy where
    it is a contiguous numeric array: a flat byte view of its memory."""
    if array.dtype.kind in "OSU" or not array.flags.c_contiguous:
        return array_to_raw(array)
    return memoryview(array.reshape(-1).view(np.uint8))


@dataclasses.dataclass(frozen=True)
class TensorCodec:
    """Decoding of protocol tensors that raises ``error`` (an exception class taking one
    message) naming ``where`` (default ``subject``); ``limit_hint`` follows the message
    of a refused BYTES element count (the option that sets the limit)."""

    error: type
    subject: str = "input"
    limit_hint: str = ""

    def numpy_dtype(self, datatype: str, where: Optional[str] = None) -> np.dtype:
        """numpy dtype of protocol ``datatype``."""
        try:
            return NUMPY_BY_DATATYPE[datatype]
        except (KeyError, TypeError):
            known = ", ".join(NUMPY_BY_DATATYPE)
            raise self.error(f"{where or self.subject}: unknown datatype {datatype!r}; expected one "
                             f"of {known}") from None

    def datatype_of(self, array: np.ndarray) -> str:
        """Protocol datatype of a numpy array (``str``/``bytes``/object arrays are BYTES)."""
        if array.dtype.kind in "OSU":
            return "BYTES"
        try:
            return DATATYPE_BY_NUMPY[array.dtype]
        except KeyError:
            raise self.error(f"arrays of dtype {array.dtype} have no protocol datatype") from None

    def element_count(self, shape: list[int], where: Optional[str] = None) -> int:
        """Number of elements of ``shape``, refusing negative, non-integer or huge dims."""
        where = where or self.subject
        if len(shape) > MAX_DIMS:
            raise self.error(f"{where}: shape has {len(shape)} dims, at most {MAX_DIMS} are accepted")
        count = 1
        for dim in shape:
            if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim <= MAX_DIM:
                raise self.error(f"{where}: shape {str(shape)[:120]} must be a list of non-negative "
                                 f"integers of at most {MAX_DIM}")
            count *= dim
        return count

    def check_bytes_elements(self, count: int, limit: int, where: Optional[str] = None) -> None:
        """Refuse a BYTES tensor of more than ``limit`` elements (each is a Python object)."""
        if count > limit:
            raise self.error(f"{where or self.subject}: {count} BYTES elements exceed the limit of "
                             f"{limit}{self.limit_hint}")

    def array_from_raw(self, raw, datatype: str, shape: list[int], where: Optional[str] = None,
                       max_bytes_elements: Optional[int] = None) -> np.ndarray:
        """Array of ``shape`` from little-endian ``raw`` bytes (BYTES: length-prefixed, at
        most ``max_bytes_elements`` of them where given).

        ``raw`` is any bytes-like object; the array shares its memory (no copy) unless it
        starts at an address that is no multiple of the element size, where it is copied:
        kernels may assume aligned elements."""
        where = where or self.subject
        dtype = self.numpy_dtype(datatype, where)
        count = self.element_count(shape, where)
        if datatype == "BYTES":
            if max_bytes_elements is not None:
                self.check_bytes_elements(count, max_bytes_elements, where)
            return self._bytes_array_from_raw(raw, count, where).reshape(shape)
        expected = count * dtype.itemsize
        if len(raw) != expected:
            raise self.error(f"{where}: got {len(raw)} bytes of data, expected {expected} for shape "
                             f"{shape} of {datatype}")
        array = np.frombuffer(raw, dtype=dtype)
        return (array if array.flags.aligned else array.copy()).reshape(shape)

    def _bytes_array_from_raw(self, raw, count: int, where: str) -> np.ndarray:
        items, offset, view = [], 0, memoryview(raw)
        while offset < len(view):
            if len(items) == count:
                raise self.error(f"{where}: more than {count} BYTES elements in the data")
            if offset + 4 > len(view):
                raise self.error(f"{where}: BYTES data ends inside a length prefix")
            (length,) = LENGTH.unpack_from(view, offset)
            offset += 4
            if offset + length > len(view):
                raise self.error(f"{where}: BYTES element runs past the end of the data")
            items.append(bytes(view[offset : offset + length]))
            offset += length
        if len(items) != count:
            raise self.error(f"{where}: got {len(items)} BYTES elements, expected {count}")
        array = np.empty(count, dtype=object)
        array[:] = items
        return array
