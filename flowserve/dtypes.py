"""flowserve dtypes: names, their numpy types, and PyTorch's promotion rules."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from flowserve.errors import DTypeError


class dtype:
    """A tensor element type (``flowserve.float32``); compares by name."""

    __slots__ = ("name", "np", "itemsize", "is_floating_point", "is_signed", "_rank")

    def __init__(self, name: str, np_type, is_float: bool, rank: int):
        self.name = name
        self.np = np.dtype(np_type)
        self.itemsize = self.np.itemsize
        self.is_floating_point = is_float
        self.is_signed = name not in ("uint8", "bool")
        self._rank = rank

    def __repr__(self) -> str:
        return f"flowserve.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))


bool_ = dtype("bool", np.bool_, False, 0)
uint8 = dtype("uint8", np.uint8, False, 1)
int8 = dtype("int8", np.int8, False, 2)
int16 = dtype("int16", np.int16, False, 3)
int32 = dtype("int32", np.int32, False, 4)
int64 = dtype("int64", np.int64, False, 5)
float16 = dtype("float16", np.float16, True, 6)
bfloat16 = dtype("bfloat16", ml_dtypes.bfloat16, True, 6)
float32 = dtype("float32", np.float32, True, 7)
float64 = dtype("float64", np.float64, True, 8)

ALL = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64, "int": int32})
_BY_NP = {d.np: d for d in ALL}

default_float = float32


def from_name(name: str) -> dtype:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise DTypeError(f"unknown dtype {name!r}; expected one of {sorted(_BY_NAME)}") from None


def session_dtype(name: str) -> str:
    """The dtype a value of dtype ``name`` crosses ONNX Runtime's Python API in: bfloat16
    travels as float32, which holds it exactly (that API has no bfloat16 arrays)."""
    return "float32" if name == "bfloat16" else name


def from_numpy(np_dtype) -> dtype:
    found = _BY_NP.get(np_dtype)
    if found is not None:
        return found
    try:
        return _BY_NP[np.dtype(np_dtype)]
    except KeyError:
        raise DTypeError(f"numpy dtype {np.dtype(np_dtype)} has no flowserve dtype") from None


def as_dtype(d) -> dtype:
    """Accept a flowserve dtype, a name, a numpy dtype or a Python type."""
    if isinstance(d, dtype):
        return d
    if isinstance(d, str):
        return from_name(d)
    if d is float:
        return float32
    if d is int:
        return int64
    if d is bool:
        return bool_
    return from_numpy(d)


def promote(a: dtype, b: dtype) -> dtype:
    """The result dtype of a binary op on two tensors (PyTorch's rules)."""
    if a is b:
        return a
    if a.is_floating_point and b.is_floating_point and a._rank == b._rank:
        return float32  # float16 with bfloat16
    if a.is_floating_point != b.is_floating_point:
        return a if a.is_floating_point else b
    if {a, b} == {uint8, int8}:
        return int16
    return a if a._rank > b._rank else b


def scalar_result(t: dtype, value) -> dtype:
    """The result dtype of a tensor of dtype ``t`` with a Python scalar (PyTorch's rules)."""
    if isinstance(value, bool):
        return t
    if isinstance(value, float) and not t.is_floating_point:
        return default_float
    if isinstance(value, int) and t is bool_:
        return int64
    return t
