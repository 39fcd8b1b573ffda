"""The ``Tensor`` method table: every method and operator that is an op, in one place.

``install`` puts the table onto ``Tensor`` when ``flowserve.ops`` is imported; each entry is
a thin call of an op function. In-place variants follow PyTorch's rules:

- ``x.add_(y)`` computes ``x + y`` and stores it in ``x`` (a functional update through
  ``Tensor._assign``, so it also works inside ``nn.Graph.build``);
- the result must keep ``x``'s size (no broadcasting ``x`` up) and be castable to ``x``'s
  dtype (a float result cannot go into an integer tensor);
- a leaf tensor that requires grad refuses in-place updates while grad mode is on.
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve._missing import ADVICE, missing
from flowserve.autograd.engine import backward as _backward
from flowserve.device import as_device
from flowserve.errors import DTypeError, ShapeError
from flowserve.ops import autocast_policy as AP
from flowserve.ops import basic, creation
from flowserve.ops import functional as F
from flowserve.ops import functional_index as FI
from flowserve.ops import functional_math as FM
from flowserve.ops import functional_special as FS
from flowserve.ops import graph_creation as GC
from flowserve.ops import random as R
from flowserve.ops.registry import current_trace
from flowserve.tensor import Tensor


def _reverse(fn):
    return lambda self, other: fn(other, self)


def _sum(self, dim=None, keepdim=False, dtype=None):
    return F.sum(self, dim, keepdim, dtype)


def _copy(self, src):
    return self._assign(F.expand(F.cast(src, self.dtype), self.shape))


def _to(self, *args, **kwargs):
    """``t.to("cuda")``, ``t.to(flow.float16)``, ``t.to(other)``, ``t.to(device, dtype)``."""
    dev, dt = None, kwargs.get("dtype")
    for a in list(args) + [kwargs.get("device")]:
        if a is None:
            continue
        if isinstance(a, Tensor):
            dev, dt = a.device, a.dtype
        elif isinstance(a, dtypes.dtype) or a in (float, int, bool):
            dt = a
        else:
            dev = a
    out = self
    if dt is not None and dtypes.as_dtype(dt) is not self._dtype:
        out = F.cast(out, dtypes.as_dtype(dt))
    if dev is not None and as_device(dev) != self._device:
        out = F.to_device(out, as_device(dev))
    return out


def _backward_method(self, gradient=None, retain_graph: bool | None = None, create_graph: bool = False,
                     inputs=None) -> None:
    """Add d(self)/d(leaf) to ``leaf.grad`` of every leaf that requires grad (PyTorch's
    ``Tensor.backward``: the graph is freed unless ``retain_graph``)."""
    _backward(self, gradient, retain_graph, create_graph, inputs)


def _kind(dt: dtypes.dtype) -> int:
    return 0 if dt is dtypes.bool_ else (2 if dt.is_floating_point else 1)


def _torch_name(dt: dtypes.dtype) -> str:
    return {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
            "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
            "bool": "Bool"}[dt.name]


def check_inplace(op: str, target, result) -> None:
    """PyTorch's rules for storing ``result`` of an in-place op into ``target``."""
    if _kind(result.dtype) > _kind(target.dtype):
        raise DTypeError(f"{op}: result type {_torch_name(result.dtype)} can't be cast to the "
                         f"desired output type {_torch_name(target.dtype)}")
    if tuple(result.shape) != tuple(target.shape):
        raise ShapeError(f"{op}: output with shape {list(target.shape)} doesn't match the "
                         f"broadcast shape {list(result.shape)}")


def inplace(fn, name: str):
    """``x.name_(...)``: ``fn(x, ...)`` stored into ``x``."""

    def method(self, *args, **kwargs):
        result = fn(self, *args, **kwargs)
        check_inplace(name + "_", self, result)
        return self._assign(result)

    method.__name__ = name + "_"
    return method


def reshaping_inplace(fn, name: str):
    """``x.unsqueeze_()`` and friends: ``x`` takes the result's size and value."""

    def method(self, *args, **kwargs):
        result = fn(self, *args, **kwargs)
        if self._lazy is not None:
            self._lazy = result._lazy
        else:
            self._data = result._data
            self._version += 1
        if result.requires_grad and not self.is_leaf:
            self._node, self._out_index = result._node, result._out_index
        return self

    method.__name__ = name + "_"
    return method


# -- random fills -----------------------------------------------------------------------------------


def _random_fill(self, sample, traced) -> object:
    """Fill ``self`` in place from ``sample(shape)`` eagerly, or ``traced(self)`` (fresh per
    call, see ``flowserve.ops.random``) inside nn.Graph.build."""
    if current_trace() is not None:
        return self._assign(traced(self))
    data = np.asarray(sample(tuple(self.shape))).astype(self.dtype.np)
    return self._assign(creation._make(data, None, self.device))


def normal_(self, mean: float = 0.0, std: float = 1.0, generator=None):
    rng = creation._rng(generator)
    return _random_fill(self, lambda shape: rng.normal(mean, std, shape), lambda t: R.normal_as(t, mean, std, generator=generator))


def uniform_(self, a: float = 0.0, b: float = 1.0, generator=None):
    rng = creation._rng(generator)
    return _random_fill(self, lambda shape: rng.uniform(a, b, shape), lambda t: R.uniform_as(t, a, b, generator=generator))


def random_(self, low: int = 0, high: int | None = None, generator=None):
    rng = creation._rng(generator)
    if high is None:
        low, high = 0, low if low else 2 ** 24
    return _random_fill(self, lambda shape: rng.integers(low, high, shape),
                        lambda t: R.integers_from(R.uniform_as(t, low, high, dtypes.float32, generator), low, high, t.dtype))


def bernoulli_(self, p: float = 0.5, generator=None):
    rng = creation._rng(generator)
    return _random_fill(self, lambda shape: rng.random(shape) < p,
                        lambda t: F.lt(R.uniform_as(t, dtype=dtypes.float32, generator=generator), p))


def _strides(t) -> tuple:
    """Element strides: the array's own for eager tensors, row-major for lazy ones."""
    if t._lazy is None and hasattr(t._data, "strides"):
        return tuple(s // t._data.itemsize for s in t._data.strides)
    out, step = [], 1
    for d in reversed(tuple(t.shape)):
        out.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(out))


def fill_(self, value):
    value = F.cast(F.as_tensor(value, like=self), self.dtype)
    if value.ndim:
        raise ShapeError(f"fill_ expected a number or a 0-d tensor, got size {tuple(value.shape)}")
    return self._assign(F.expand(value, self.shape))


# -- new_* ----------------------------------------------------------------------------------------------


def _new(fill):
    def method(self, *size, dtype=None, device=None, requires_grad=False):
        return fill(basic._shape_arg(size), dtype or self.dtype, device or self.device, requires_grad)

    return method


def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    return GC.full(tuple(size), fill_value, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)


def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    return creation.tensor(data, dtype=dtype or self.dtype, device=device or self.device,
                           requires_grad=requires_grad)


def _setitem(self, key, value) -> None:
    FI.setitem(self, key, value)


# -- the table ---------------------------------------------------------------------------------

METHODS = {
    "to": _to, "clone": F.clone, "backward": _backward_method,
    "__add__": F.add, "__radd__": _reverse(F.add), "__sub__": F.sub, "__rsub__": _reverse(F.sub),
    "__mul__": F.mul, "__rmul__": _reverse(F.mul), "__truediv__": basic.div,
    "__rtruediv__": _reverse(basic.div), "__pow__": F.pow, "__rpow__": _reverse(F.pow),
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

METHODS.update({
    "__setitem__": _setitem, "__mod__": FM.remainder, "__rmod__": lambda s, o: FM.remainder(o, s),
    "__floordiv__": FM.floor_divide, "__rfloordiv__": lambda s, o: FM.floor_divide(o, s),
    "__and__": FM.bitwise_and, "__or__": FM.bitwise_or, "__xor__": FM.bitwise_xor,
    "__rand__": FM.bitwise_and, "__ror__": FM.bitwise_or, "__rxor__": FM.bitwise_xor,
    "__invert__": lambda s: F.logical_not(s) if s.dtype is dtypes.bool_ else FM.bitwise_not(s),
    "max": FM.max_, "min": FM.min_, "normal_": normal_, "uniform_": uniform_, "random_": random_,
    "bernoulli_": bernoulli_, "fill_": fill_, "zero_": lambda self: fill_(self, 0),
    "new_zeros": _new(lambda s, dt, dev, rg: GC.zeros(s, dtype=dt, device=dev, requires_grad=rg)),
    "new_ones": _new(lambda s, dt, dev, rg: GC.ones(s, dtype=dt, device=dev, requires_grad=rg)),
    "new_empty": _new(lambda s, dt, dev, rg: GC.empty(s, dtype=dt, device=dev, requires_grad=rg)),
    "new_full": new_full, "new_tensor": new_tensor,
    "var": FM.var, "std": FM.std, "prod": FM.prod, "logsumexp": FM.logsumexp, "norm": FM.norm,
    "cumsum": FI.cumsum, "topk": FI.topk, "sort": FI.sort, "argsort": FI.argsort,
    "gather": FI.gather, "scatter": FI.scatter, "scatter_add": FI.scatter_add,
    "index_select": FI.index_select, "masked_fill": FI.masked_fill, "masked_select": FI.masked_select,
    "nonzero": FI.nonzero, "narrow": FI.narrow, "split": FI.split, "chunk": FI.chunk,
    "unbind": FI.unbind, "repeat": FI.repeat, "tile": FI.tile, "flip": FI.flip, "roll": FI.roll,
    "take_along_dim": FI.take_along_dim, "bmm": FM.bmm, "dot": FM.dot, "outer": FM.outer,
    "allclose": FM.allclose, "isclose": FM.isclose, "equal": FM.equal,
    "contiguous": lambda self, memory_format=None: self,
    "argmax": F.argmax, "argmin": F.argmin, "clamp_min": lambda s, m: F.clamp(s, min=m),
    "clamp_max": lambda s, m: F.clamp(s, max=m), "true_divide": F.div, "floor_divide": FM.floor_divide,
    "divide": F.divide, "diff": F.diff, "absolute": F.absolute, "multiply": F.multiply, "subtract": F.subtract,
    "negative": F.negative, "greater": F.greater, "greater_equal": F.greater_equal, "less": F.less,
    "less_equal": F.less_equal, "not_equal": F.not_equal, "swapaxes": F.swapaxes, "swapdims": F.swapdims,
    "positive": F.positive, "movedim": F.movedim, "moveaxis": F.moveaxis, "ravel": F.ravel,
    "unflatten": F.unflatten, "fliplr": F.fliplr, "flipud": F.flipud, "addmm": F.addmm, "baddbmm": F.baddbmm,
    "addmv": F.addmv, "addcmul": F.addcmul, "addcdiv": F.addcdiv, "lerp": F.lerp, "mv": F.mv, "inner": F.inner,
    "vdot": F.vdot, "trace": F.trace, "sinh": F.sinh, "cosh": F.cosh, "deg2rad": F.deg2rad, "rad2deg": F.rad2deg,
    "logaddexp": F.logaddexp, "logaddexp2": F.logaddexp2, "hypot": F.hypot, "logit": F.logit, "xlogy": F.xlogy,
    "nan_to_num": F.nan_to_num, "nansum": F.nansum, "nanmean": F.nanmean, "count_nonzero": F.count_nonzero,
    "is_complex": F.is_complex, "is_nonzero": F.is_nonzero, "broadcast_to": F.broadcast_to,
    "tensor_split": FI.tensor_split, "msort": FI.msort, "ndimension": lambda self: self.ndim,
    "byte": lambda self: F.cast(self, dtypes.uint8), "char": lambda self: F.cast(self, dtypes.int8),
    "short": lambda self: F.cast(self, dtypes.int16),
    "remainder": FM.remainder, "fmod": FM.fmod, "reciprocal": FM.reciprocal,
    "index_add": FI.index_add, "index_copy": FI.index_copy, "index_fill": FI.index_fill,
    "any": FM.any_, "all": FM.all_, "tril": FI.tril, "triu": FI.triu, "argwhere": FI.argwhere,
})
for _name in ("sin", "cos", "tan", "erf", "erfc", "expm1", "log1p", "log2", "log10", "exp2", "floor",
              "ceil", "round", "trunc", "frac", "isnan", "isinf", "isfinite", "logical_and",
              "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"):
    METHODS[_name] = getattr(FM, _name)
METHODS.update({name: getattr(AP, name) for name in ("matmul", "mm", "bmm")})  # flow.autocast's policy
METHODS.update({"__matmul__": AP.matmul, "__rmatmul__": _reverse(AP.matmul)})
METHODS["logical_not"] = F.logical_not
METHODS["erfinv"] = FS.erfinv
METHODS["stride"] = lambda self, dim=None: _strides(self) if dim is None else _strides(self)[dim]
METHODS["is_contiguous"] = lambda self, memory_format=None: self._lazy is not None or \
    bool(getattr(self._data, "flags", None) is None or self._data.flags.c_contiguous)

def _addcmul(self, tensor1, tensor2, *, value=1):
    """``self + value * tensor1 * tensor2`` (PyTorch's order of operations)."""
    return self + (tensor1 * value if not isinstance(value, (int, float)) or value != 1 else tensor1) * tensor2


def _addcdiv(self, tensor1, tensor2, *, value=1):
    """``self + value * tensor1 / tensor2`` (PyTorch's order of operations)."""
    return self + (tensor1 * value) / tensor2


def _lerp(self, end, weight):
    """``self + weight * (end - self)``, rounded as PyTorch's kernel (from ``end`` for a
    number weight of 0.5 or more)."""
    if isinstance(weight, (int, float)) and weight >= 0.5:
        return end - (end - self) * (1 - weight)
    return self + (end - self) * weight


METHODS.update({"addcmul": _addcmul, "addcdiv": _addcdiv, "lerp": _lerp})

_ARITHMETIC = {
    "add": F.add, "sub": F.sub, "mul": F.mul, "div": F.div, "true_divide": F.div, "pow": F.pow,
    "neg": F.neg, "abs": F.abs, "sign": F.sign, "square": F.square, "exp": F.exp, "log": F.log,
    "sqrt": F.sqrt, "rsqrt": F.rsqrt, "tanh": F.tanh, "sigmoid": F.sigmoid, "relu": F.relu,
    "clamp": F.clamp, "clip": F.clamp, "maximum": F.maximum, "minimum": F.minimum,
    "masked_fill": FI.masked_fill, "scatter": FI.scatter, "scatter_add": FI.scatter_add,
    "eq": F.eq, "ne": F.ne, "lt": F.lt, "le": F.le, "gt": F.gt, "ge": F.ge,
    "clamp_min": METHODS["clamp_min"], "clamp_max": METHODS["clamp_max"],
    "tril": FI.tril, "triu": FI.triu, "index_add": FI.index_add, "index_copy": FI.index_copy,
    "index_fill": FI.index_fill, "erfinv": FS.erfinv,
    "addcmul": _addcmul, "addcdiv": _addcdiv, "lerp": _lerp,
}
for _name in ("sin", "cos", "tan", "erf", "expm1", "log1p", "log2", "log10", "floor", "ceil", "round",
              "trunc", "frac", "remainder", "fmod", "floor_divide", "reciprocal", "logical_and",
              "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
              "bitwise_not"):
    _ARITHMETIC[_name] = METHODS[_name]
for _name, _fn in _ARITHMETIC.items():
    METHODS[_name + "_"] = inplace(_fn, _name)
for _name, _fn in {"unsqueeze": F.unsqueeze, "squeeze": F.squeeze, "t": F.t, "transpose": F.transpose,
                   "flatten": F.flatten}.items():
    METHODS[_name + "_"] = reshaping_inplace(_fn, _name)
METHODS.update({"__iadd__": METHODS["add_"], "__isub__": METHODS["sub_"], "__imul__": METHODS["mul_"],
                "__itruediv__": METHODS["div_"], "__imod__": METHODS["remainder_"],
                "__ifloordiv__": METHODS["floor_divide_"], "__ipow__": METHODS["pow_"],
                "__iand__": METHODS["bitwise_and_"], "__ior__": METHODS["bitwise_or_"],
                "__ixor__": METHODS["bitwise_xor_"]})

PROPERTIES = {
    "T": lambda self: F.permute(self, list(range(self.ndim))[::-1]),
    "mT": lambda self: F.transpose(self, -2, -1),
    "is_xpu": lambda self: False,  # OneFlow's other accelerators: flowserve runs on CPU and CUDA
    "is_global": lambda self: False,  # flowserve tensors are local (OneFlow's global tensors span ranks)
    "itemsize": lambda self: self.dtype.itemsize,
    "nbytes": lambda self: self.dtype.itemsize * self.numel(),
}


def _absent(name: str):
    """A PyTorch/OneFlow tensor attribute flowserve lacks: reading it raises the AttributeError
    that says what to use instead (and ``hasattr`` is False). A property per known name, not
    ``Tensor.__getattr__``, which would slow every attribute access of every tensor."""

    def read(self):
        raise missing("Tensor", name)

    return read


PROPERTIES.update({name: _absent(name) for name in ADVICE["Tensor"]})


def install(cls) -> None:
    for name, fn in METHODS.items():
        setattr(cls, name, fn)
    for name, fn in PROPERTIES.items():
        setattr(cls, name, property(fn))
