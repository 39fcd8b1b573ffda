"""The protocol's datatype names and their numpy, flowserve and Triton names.

The protocol names tensors' element types with strings (``"FP32"``, ``"BYTES"``,
``"BF16"``); BYTES tensors hold Python ``bytes`` in numpy ``object`` arrays::

    >>> NUMPY_BY_DATATYPE["BF16"].name, DATATYPE_BY_FLOWSERVE["float32"]
    ('bfloat16', 'FP32')
"""

from __future__ import annotations

import types

import ml_dtypes
import numpy as np

NUMPY_BY_DATATYPE = types.MappingProxyType({
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
})
DATATYPE_BY_NUMPY = types.MappingProxyType({v: k for k, v in NUMPY_BY_DATATYPE.items()})

DATATYPE_BY_FLOWSERVE = types.MappingProxyType({
    "float32": "FP32",
    "float16": "FP16",
    "bfloat16": "BF16",
    "float64": "FP64",
    "int64": "INT64",
    "int32": "INT32",
    "int8": "INT8",
    "uint8": "UINT8",
    "bool": "BOOL",
})

# Triton's model_config DataType enum names, for the /config endpoint.
TRITON_TYPE_BY_DATATYPE = types.MappingProxyType({
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
})
