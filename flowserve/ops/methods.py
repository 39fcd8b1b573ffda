"""Tensor methods and operators, each a thin call of an op function."""

from __future__ import annotations

from flowserve.ops import functional as F


def _reverse(fn):
    return lambda self, other: fn(other, self)


def _inplace(fn):
    def method(self, *args, **kwargs):
        return self._assign(fn(self, *args, **kwargs))

    method.__name__ = fn.__name__ + "_"
    return method


def _sum(self, dim=None, keepdim=False, dtype=None):
    return F.sum(self, dim, keepdim, dtype)


def _max(self, dim=None, keepdim=False):
    if dim is None:
        return F.amax(self)
    from flowserve.ops.functional_index import max_with_indices

    return max_with_indices(self, dim, keepdim)


def _min(self, dim=None, keepdim=False):
    if dim is None:
        return F.amin(self)
    from flowserve.ops.functional_index import min_with_indices

    return min_with_indices(self, dim, keepdim)


def _new_zeros(self, *size, dtype=None):
    return F.expand(F.scalar_tensor(0, dtype or self.dtype, self.device), F._shape_arg(size))


def _fill(self, value):
    return self._assign(F.expand(F.scalar_tensor(value, self.dtype, self.device), self.shape))


def _zero(self):
    return _fill(self, 0)


def _copy(self, src):
    return self._assign(F.expand(F.cast(src, self.dtype), self.shape))


METHODS = {
    "__add__": F.add, "__radd__": _reverse(F.add), "__sub__": F.sub, "__rsub__": _reverse(F.sub),
    "__mul__": F.mul, "__rmul__": _reverse(F.mul), "__truediv__": F.div,
    "__rtruediv__": _reverse(F.div), "__pow__": F.pow, "__rpow__": _reverse(F.pow),
    "__matmul__": F.matmul, "__rmatmul__": _reverse(F.matmul), "__neg__": F.neg,
    "__abs__": F.abs, "__eq__": F.eq, "__ne__": F.ne, "__lt__": F.lt, "__le__": F.le,
    "__gt__": F.gt, "__ge__": F.ge, "__getitem__": F.getitem, "__invert__": F.logical_not,
    "add": F.add, "sub": F.sub, "mul": F.mul, "div": F.div, "pow": F.pow, "neg": F.neg,
    "matmul": F.matmul, "mm": F.matmul, "exp": F.exp, "log": F.log, "sqrt": F.sqrt,
    "rsqrt": F.rsqrt, "tanh": F.tanh, "sigmoid": F.sigmoid, "relu": F.relu, "abs": F.abs,
    "sign": F.sign, "square": F.square, "clamp": F.clamp, "clip": F.clamp, "floor": F.floor,
    "maximum": F.maximum, "minimum": F.minimum, "eq": F.eq, "ne": F.ne, "lt": F.lt,
    "le": F.le, "gt": F.gt, "ge": F.ge, "where": lambda self, c, y: F.where(c, self, y),
    "sum": _sum, "mean": F.mean, "amax": F.amax, "amin": F.amin, "max": _max, "min": _min,
    "argmax": F.argmax, "argmin": F.argmin, "sum_to": F.sum_to,
    "reshape": F.reshape, "view": F.view, "flatten": F.flatten, "unsqueeze": F.unsqueeze,
    "squeeze": F.squeeze, "permute": F.permute, "transpose": F.transpose, "t": F.t,
    "expand": F.expand, "expand_as": lambda self, o: F.expand(self, o.shape),
    "view_as": lambda self, o: F.reshape(self, o.shape), "reshape_as": lambda self, o: F.reshape(self, o.shape),
    "softmax": F.softmax, "log_softmax": F.log_softmax, "new_zeros": _new_zeros,
    "fill_": _fill, "zero_": _zero, "copy_": _copy,
}
for _name in ("add", "sub", "mul", "div", "pow", "clamp", "exp", "log", "sqrt", "tanh",
              "sigmoid", "relu", "neg", "abs", "unsqueeze", "squeeze"):
    METHODS[_name + "_"] = _inplace(METHODS[_name])
METHODS.update({"__iadd__": METHODS["add_"], "__isub__": METHODS["sub_"],
                "__imul__": METHODS["mul_"], "__itruediv__": METHODS["div_"]})

from flowserve.ops.tensor_methods import METHODS as _TENSOR_METHODS  # noqa: E402

METHODS.update(_TENSOR_METHODS)  # indexing, math, ordering; in-place ops with PyTorch's rules

PROPERTIES = {
    "T": lambda self: F.permute(self, list(range(self.ndim))[::-1]),
    "mT": lambda self: F.transpose(self, -2, -1),
}


def install(cls) -> None:
    for name, fn in METHODS.items():
        setattr(cls, name, fn)
    for name, fn in PROPERTIES.items():
        setattr(cls, name, property(fn))
