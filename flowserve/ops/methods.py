"""Tensor methods and operators, each a thin call of an op function."""

from __future__ import annotations

from flowserve.ops import functional as F


def _reverse(fn):
    return lambda self, other: fn(other, self)


def _sum(self, dim=None, keepdim=False, dtype=None):
    return F.sum(self, dim, keepdim, dtype)


def _copy(self, src):
    return self._assign(F.expand(F.cast(src, self.dtype), self.shape))


METHODS = {
    "__add__": F.add, "__radd__": _reverse(F.add), "__sub__": F.sub, "__rsub__": _reverse(F.sub),
    "__mul__": F.mul, "__rmul__": _reverse(F.mul), "__truediv__": F.div,
    "__rtruediv__": _reverse(F.div), "__pow__": F.pow, "__rpow__": _reverse(F.pow),
    "__matmul__": F.matmul, "__rmatmul__": _reverse(F.matmul), "__neg__": F.neg,
    "__abs__": F.abs, "__eq__": F.eq, "__ne__": F.ne, "__lt__": F.lt, "__le__": F.le,
    "__gt__": F.gt, "__ge__": F.ge, "__getitem__": F.getitem,
    "add": F.add, "sub": F.sub, "mul": F.mul, "div": F.div, "pow": F.pow, "neg": F.neg,
    "matmul": F.matmul, "mm": F.matmul, "exp": F.exp, "log": F.log, "sqrt": F.sqrt,
    "rsqrt": F.rsqrt, "tanh": F.tanh, "sigmoid": F.sigmoid, "relu": F.relu, "abs": F.abs,
    "sign": F.sign, "square": F.square, "clamp": F.clamp, "clip": F.clamp, "floor": F.floor,
    "maximum": F.maximum, "minimum": F.minimum, "eq": F.eq, "ne": F.ne, "lt": F.lt,
    "le": F.le, "gt": F.gt, "ge": F.ge, "where": lambda self, c, y: F.where(c, self, y),
    "sum": _sum, "mean": F.mean, "amax": F.amax, "amin": F.amin, "sum_to": F.sum_to,
    "reshape": F.reshape, "view": F.view, "flatten": F.flatten, "unsqueeze": F.unsqueeze,
    "squeeze": F.squeeze, "permute": F.permute, "transpose": F.transpose, "t": F.t,
    "expand": F.expand, "expand_as": lambda self, o: F.expand(self, o.shape),
    "view_as": lambda self, o: F.reshape(self, o.shape), "reshape_as": lambda self, o: F.reshape(self, o.shape),
    "softmax": F.softmax, "log_softmax": F.log_softmax, "copy_": _copy,
}

from flowserve.ops.tensor_methods import METHODS as _TENSOR_METHODS  # noqa: E402

METHODS.update(_TENSOR_METHODS)  # indexing, math, ordering, max/min, fills; in-place ops with PyTorch's rules

PROPERTIES = {
    "T": lambda self: F.permute(self, list(range(self.ndim))[::-1]),
    "mT": lambda self: F.transpose(self, -2, -1),
}


def install(cls) -> None:
    for name, fn in METHODS.items():
        setattr(cls, name, fn)
    for name, fn in PROPERTIES.items():
        setattr(cls, name, property(fn))
