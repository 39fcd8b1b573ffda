"""The server's side of the protocol's tensors: its decoding limits, errors and ONNX names.

The datatype tables and the raw-bytes codec are the protocol's
(``flowserve.protocol.datatypes`` and ``.tensors``, shared with the clients); here they
are bound to the server's ``InvalidRequestError``, with the limits one request may make
the server build, and the table from ONNX ``TensorProto`` element types (a served
model's signature) to protocol datatypes::

    >>> array_from_raw(b"\\x00\\x00\\x80?", "FP32", [1]).tolist()
    [1.0]
"""

from __future__ import annotations

import dataclasses
import types

from onnx import TensorProto

from flowserve.protocol.tensors import TensorCodec

from .errors import InvalidRequestError

DATATYPE_BY_ONNX = types.MappingProxyType({
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
})

DEFAULT_MAX_BYTES_ELEMENTS = 1 << 20
# requests and responses above this size are decoded/encoded in a worker thread, so the
# event loop keeps answering (health checks, small requests); below it the hop costs more
OFFLOAD_BYTES = 1 << 20

REQUEST_CODEC = TensorCodec(InvalidRequestError, subject="input", limit_hint=" (--max-bytes-elements)")
numpy_dtype = REQUEST_CODEC.numpy_dtype
datatype_of = REQUEST_CODEC.datatype_of
element_count = REQUEST_CODEC.element_count
check_bytes_elements = REQUEST_CODEC.check_bytes_elements
array_from_raw = REQUEST_CODEC.array_from_raw


@dataclasses.dataclass(frozen=True)
class DecodeLimits:
    """What one request may make the server build, checked before it is built."""

    max_bytes_elements: int = DEFAULT_MAX_BYTES_ELEMENTS  # each becomes a Python bytes object
    max_json_elements: int = 1 << 24  # values in a JSON body (numbers, strings)
