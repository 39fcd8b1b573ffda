"""The basic op functions (``add``, ``sum``, ``reshape``, ``matmul``, ...): dtype promotion
and argument normalisation in front of the primitives, and composite ops written once in
terms of primitives (they need no gradient or lowering of their own).

The other op families (``math_functions``, ``indexing_functions``, ...) build on these;
users reach all of them through the explicit namespace ``flowserve.ops.functional``."""

from __future__ import annotations

import math
import numbers

import numpy as np

from flowserve import dtypes
from flowserve.device import CPU
from flowserve.ops.dims import BatchDim, as_dim, same_shape
from flowserve.ops import elementwise
from flowserve.ops import nn as nn_ops
from flowserve.ops import reduce as reduce_ops
from flowserve.ops import shape as shape_ops
from flowserve.ops.registry import current_trace, fail_dtype, fail_shape, normalize_axis
from flowserve.tensor import Tensor, array_from, from_array

# -- promotion -------------------------------------------------------------------------


def scalar_tensor(value, dtype: dtypes.dtype, device) -> Tensor:
    return Tensor._wrap(device.xp.asarray(value, dtype=dtype.np), device)


def as_tensor(x, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, numbers.Number):
        dt = dtypes.scalar_result(like.dtype, x) if like is not None else dtypes.as_dtype(type(x))
        return scalar_tensor(x, dt, like.device if like is not None else CPU)
    return from_array(
        np.array(array_from(x, dtypes.default_float), copy=True), device=like.device if like is not None else None
    )


def _result_dtype(a: Tensor, b: Tensor) -> dtypes.dtype:
    da, db = a._dtype, b._dtype
    if da is db:
        return da
    # a 0-d tensor does not change the dtype of a dimensioned one of the same kind
    if (a.ndim == 0) != (b.ndim == 0) and da.is_floating_point == db.is_floating_point and \
            (da is not dtypes.bool_) == (db is not dtypes.bool_):
        return db if a.ndim == 0 else da
    return dtypes.promote(da, db)


def coerce(a, b) -> tuple[Tensor, Tensor]:
    """Both operands as tensors of their promoted dtype (PyTorch's rules)."""
    if not isinstance(a, Tensor):
        b_ = b if isinstance(b, Tensor) else as_tensor(b)
        a = as_tensor(a, like=b_)
        b = b_
    elif not isinstance(b, Tensor):
        b = as_tensor(b, like=a)
    dt = _result_dtype(a, b)
    if a._dtype is not dt:
        a = cast(a, dt)
    if b._dtype is not dt:
        b = cast(b, dt)
    return a, b


def cast(x: Tensor, dtype) -> Tensor:
    dtype = dtypes.as_dtype(dtype)
    return x if x._dtype is dtype else elementwise.cast(x, dtype=dtype.name)


def _float_operands(a, b):
    a, b = coerce(a, b)
    if not a._dtype.is_floating_point:
        a, b = cast(a, dtypes.default_float), cast(b, dtypes.default_float)
    return a, b


# -- arithmetic --------------------------------------------------------------------------


def add(a, b, alpha=1):
    if alpha != 1:
        b = mul(b, alpha)
    elif type(a) is type(b) is Tensor and a._dtype is b._dtype:
        return elementwise.add(a, b)  # nothing to promote: the hot path of ``a + b``
    return elementwise.add(*coerce(a, b))


def sub(a, b, alpha=1):
    if alpha != 1:
        b = mul(b, alpha)
    return elementwise.sub(*coerce(a, b))


def mul(a, b):
    return elementwise.mul(*coerce(a, b))


def div(a, b):
    """True division (``math_functions.div`` adds PyTorch's ``rounding_mode``)."""
    return elementwise.div(*_float_operands(a, b))


true_divide = div


def pow(a, b):  # noqa: A001 - the public name is flow.pow
    if isinstance(b, numbers.Number) and isinstance(a, Tensor) and not a._dtype.is_floating_point \
            and isinstance(b, float):
        a = cast(a, dtypes.default_float)
    return elementwise.pow_(*coerce(a, b))


def neg(x):
    return elementwise.neg(x)


def maximum(a, b):
    return elementwise.maximum(*coerce(a, b))


def minimum(a, b):
    return elementwise.minimum(*coerce(a, b))


def clamp(x, min=None, max=None):  # noqa: A002 - PyTorch's argument names
    if min is not None:
        x = maximum(x, min)
    if max is not None:
        x = minimum(x, max)
    return x


clip = clamp


def _floatify(x: Tensor) -> Tensor:
    return x if x._dtype.is_floating_point else cast(x, dtypes.default_float)


def exp(x):
    return elementwise.exp(_floatify(x))


def log(x):
    return elementwise.log(_floatify(x))


def sqrt(x):
    return elementwise.sqrt(_floatify(x))


def rsqrt(x):
    return 1.0 / sqrt(x)


def tanh(x):
    return elementwise.tanh(_floatify(x))


def sigmoid(x):
    return elementwise.sigmoid(_floatify(x))


def relu(x):
    return elementwise.relu(x)


def abs(x):  # noqa: A001
    return elementwise.abs_(x)


def sign(x):
    return elementwise.sign(x)


def square(x):
    return mul(x, x)


def _compare(prim):
    def fn(a, b):
        return prim(*coerce(a, b))

    fn.__name__ = prim.name
    return fn


eq, ne, lt, le, gt, ge = (
    _compare(p)
    for p in (elementwise.eq, elementwise.ne, elementwise.lt, elementwise.le, elementwise.gt, elementwise.ge)
)


def where(condition, x, y):
    """Elementwise choice (``indexing_functions.where`` adds the one-argument form); a
    condition made from numpy (or on the CPU) is moved to the operands' device."""
    x, y = coerce(x, y)
    return elementwise.where(to_device(as_tensor(condition), x.device), x, y)


def logical_not(x):
    return eq(cast(x, dtypes.bool_), False)


# -- reductions --------------------------------------------------------------------------


def _axes(x: Tensor, dim, op: str) -> list:
    if dim is None:
        return list(range(x.ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({normalize_axis(op, d, x.ndim) for d in dims})


def _accumulate_dtype(x: Tensor) -> Tensor:
    return x if x._dtype.is_floating_point else cast(x, dtypes.int64)


def sum(x, dim=None, keepdim=False, dtype=None):  # noqa: A001
    x = cast(x, dtype) if dtype is not None else _accumulate_dtype(x)
    return reduce_ops.sum_(x, axes=_axes(x, dim, "sum"), keepdims=bool(keepdim))


def mean(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = cast(x, dtype)
    if not x._dtype.is_floating_point:
        raise_dtype("mean", "a floating point input (or dtype=...)", x._dtype)
    axes = _axes(x, dim, "mean")
    count = math.prod(x.shape[a] for a in axes)
    return reduce_ops.sum_(x, axes=axes, keepdims=bool(keepdim)) * (1.0 / max(count, 1))


def raise_dtype(op, expected, given):
    fail_dtype(op, expected, given)


def amax(x, dim=None, keepdim=False):
    return reduce_ops.amax(x, axes=_axes(x, dim, "amax"), keepdims=bool(keepdim))


def amin(x, dim=None, keepdim=False):
    return reduce_ops.amin(x, axes=_axes(x, dim, "amin"), keepdims=bool(keepdim))


def argmax(x, dim=None, keepdim=False):
    if dim is None:
        return reduce_ops.argmax(reshape(x, (-1,)), axis=0, keepdims=False)
    return reduce_ops.argmax(x, axis=normalize_axis("argmax", dim, x.ndim), keepdims=bool(keepdim))


def argmin(x, dim=None, keepdim=False):
    if dim is None:
        return reduce_ops.argmin(reshape(x, (-1,)), axis=0, keepdims=False)
    return reduce_ops.argmin(x, axis=normalize_axis("argmin", dim, x.ndim), keepdims=bool(keepdim))


def sum_to(x: Tensor, shape) -> Tensor:
    """Sum ``x`` down to ``shape`` (the inverse of broadcasting ``shape`` to ``x.shape``)."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    lead = x.ndim - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1]
    out = reduce_ops.sum_(x, axes=axes, keepdims=True) if axes else x
    return reshape(out, shape)


# -- shapes ------------------------------------------------------------------------------


def _shape_arg(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(as_dim(s) for s in shape)


def infer_shape(x: Tensor, shape: tuple, op: str = "reshape") -> list:
    shape = list(shape)
    if shape.count(-1) > 1:
        fail_shape(op, "at most one -1 in the shape", tuple(shape))
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        total = x.numel()
        if known == 0 or total % known:
            fail_shape(op, f"a shape compatible with {total} elements", f"{tuple(shape)} for input {tuple(x.shape)}")
        shape[shape.index(-1)] = _inferred_dim(x.shape, shape, total // known)
    return shape


def _inferred_dim(in_shape, shape: list, size: int):
    """The size a ``-1`` stands for; in a trace whose input holds the batch (a ``BatchDim``),
    an expression of it where the size is the batch times or divided by a constant
    (``x.reshape(-1, 28, 28)`` of ``(B, 1, 28, 28)`` is ``B``), so it keeps following the batch."""
    marks = [d for d in in_shape if isinstance(d, BatchDim)]
    if len(marks) != 1 or any(isinstance(d, BatchDim) for d in shape):  # (view(B, -1): the rest is plain)
        return size
    known = math.prod(int(d) for d in shape if d != -1)
    rest = math.prod(int(d) for d in in_shape if not isinstance(d, BatchDim))
    if rest % known == 0:
        return marks[0] * (rest // known)
    if known % rest == 0 and int(marks[0]) % (known // rest) == 0:
        return marks[0] // (known // rest)
    return size


def reshape(x, *sizes, shape=None):
    """``reshape(x, 2, 3)``, ``reshape(x, (2, 3))`` or OneFlow's ``reshape(x, shape=(2, 3))``."""
    if shape is not None and sizes:
        raise TypeError(f"reshape() takes the new shape once: got sizes {sizes} and shape={shape}")
    shape = infer_shape(x, _shape_arg(sizes if shape is None else (shape,)))
    if same_shape(x.shape, shape):
        return x
    return shape_ops.reshape(x, shape=shape)


view = reshape


def flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return reshape(x, (1,))
    s = normalize_axis("flatten", start_dim, x.ndim)
    e = normalize_axis("flatten", end_dim, x.ndim)
    shape = tuple(x.shape[:s]) + (math.prod(x.shape[s:e + 1]),) + tuple(x.shape[e + 1:])
    return reshape(x, shape)


def unsqueeze(x, dim: int):
    d = normalize_axis("unsqueeze", dim, x.ndim + 1)
    shape = list(x.shape)
    shape.insert(d, 1)
    out = reshape(x, shape)
    if d == x.ndim and out._lazy is None and not out.is_global:  # a global tensor's pieces keep theirs
        out._data = _unit_last_stride(out._data, x._device.xp)
    return out


def _unit_last_stride(a, xp):
    """``a``, whose last dim (of size 1) ``unsqueeze`` has just added, with that dim's stride
    1 as PyTorch and OneFlow give it (numpy's reshape gives it the stride of the dim
    before); the stride of a size-1 dim moves no element."""
    if a.strides[-1] == a.itemsize:
        return a
    return xp.lib.stride_tricks.as_strided(a, a.shape, a.strides[:-1] + (a.itemsize,))


def squeeze(x, dim=None):
    if dim is None:
        return reshape(x, [d for d in x.shape if d != 1])
    dims = {normalize_axis("squeeze", d, x.ndim) for d in ([dim] if isinstance(dim, int) else dim)}
    return reshape(x, [d for i, d in enumerate(x.shape) if not (i in dims and d == 1)])


def permute(x, *dims):
    dims = [normalize_axis("permute", d, x.ndim) for d in _shape_arg(dims)]
    if dims == list(range(x.ndim)):
        return x
    return shape_ops.permute(x, perm=dims)


def transpose(x, dim0: int, dim1: int):
    perm = list(range(x.ndim))
    a, b = normalize_axis("transpose", dim0, x.ndim), normalize_axis("transpose", dim1, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, perm)


def t(x):
    return x if x.ndim < 2 else transpose(x, 0, 1)


def expand(x, *shape):
    shape = list(_shape_arg(shape))
    lead = len(shape) - x.ndim
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape)]
    if same_shape(x.shape, shape):
        return x
    return shape_ops.expand(x, shape=shape)


def broadcast_to(x, shape):
    return expand(x, shape)


def cat(tensors, dim: int = 0):
    tensors = list(tensors)
    if not tensors:
        fail_shape("cat", "a non-empty sequence of tensors", "[]")
    dt = tensors[0]._dtype
    for other in tensors[1:]:
        dt = dtypes.promote(dt, other._dtype)
    tensors = [cast(x, dt) for x in tensors]
    axis = normalize_axis("cat", dim, tensors[0].ndim)
    return tensors[0] if len(tensors) == 1 else shape_ops.concat(*tensors, axis=axis)


concat = cat


def stack(tensors, dim: int = 0):
    tensors = list(tensors)
    d = normalize_axis("stack", dim, tensors[0].ndim + 1)
    return cat([unsqueeze(x, d) for x in tensors], d)


def slice_axis(x, axis: int, start: int, end: int, step: int = 1):
    axis = normalize_axis("slice", axis, x.ndim)  # the shape rule (run when tracing) wants it positive
    return shape_ops.slice_(x, starts=[start], ends=[end], axes=[axis], steps=[step])


def _slice_indices(k: slice, size):
    """``k.indices(size)``; along the batch of a trace (``size`` a ``BatchDim``), an omitted stop,
    a stop that is the batch or an expression of it, and a negative start or stop within range
    stay expressions of the batch (``x[1:]``, ``x[:B // 2]``, ``x[-1:]``), so the slice follows
    it at run time; other ints stay as written (clamped at the traced size, as ``indices``)."""
    s, e, st = k.indices(size)
    if not isinstance(size, BatchDim) or st != 1:
        return s, e, st

    def symbolic(v, default):
        if v is None:
            return default
        if isinstance(v, BatchDim):
            return v if 0 <= v <= size else None
        if type(v) is int and -size <= v < 0:
            return size + v
        return None

    start, stop = symbolic(k.start, 0), symbolic(k.stop, size)
    return (s if start is None else start), (e if stop is None else stop), st


def getitem(x: Tensor, key):
    """Basic indexing: ints, slices, ``None`` and ``...`` (``indexing_functions.getitem``
    adds tensor indices)."""
    if not isinstance(key, tuple):
        key = (key,)
    n_real = len([k for k in key if k is not None and k is not Ellipsis])
    if n_real > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (x.ndim - n_real) + key[i + 1:]
    starts, ends, axes, steps, shape, axis = [], [], [], [], [], 0
    for k in key:
        if k is None:
            shape.append(1)
            continue
        size = x.shape[axis]
        if isinstance(k, slice):
            s, e, st = _slice_indices(k, size)
            if st <= 0:
                raise ValueError("step must be greater than zero")
            # a whole-dim slice is no op, unless a bound is an expression of the batch (x[B - 2:] at B = 2)
            if (s, e, st) != (0, size, 1) or getattr(s, "steps", ()) or getattr(e, "steps", ()):
                starts.append(s), ends.append(max(e, s)), axes.append(axis), steps.append(st)
            shape.append(len(range(s, e, st)))
        else:
            i = int(k)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {axis} with size {size}")
            i %= size
            starts.append(i), ends.append(i + 1), axes.append(axis), steps.append(1)
        axis += 1
    shape += list(x.shape[axis:])
    out = shape_ops.slice_(x, starts=starts, ends=ends, axes=axes, steps=steps) if axes else x
    return reshape(out, shape)


# -- nn ----------------------------------------------------------------------------------


def matmul(a, b):
    return nn_ops.matmul(*coerce(a, b))


mm = matmul


def log_softmax(x, dim: int = -1):
    return nn_ops.log_softmax(_floatify(x), axis=normalize_axis("log_softmax", dim, x.ndim))


def softmax(x, dim: int = -1):
    return nn_ops.softmax(_floatify(x), axis=normalize_axis("softmax", dim, x.ndim))


def one_hot(index, num_classes: int = -1, dtype=dtypes.int64):
    if num_classes < 0:
        num_classes = int(index.max().item()) + 1
    return nn_ops.one_hot(index, num_classes=int(num_classes), dtype=dtypes.as_dtype(dtype).name)


def clone(x):
    return nn_ops.copy(x)


def to_device(x, device):
    """``x`` copied to ``device`` (the gradient goes back the same way); inside a graph,
    which runs on one device, ``x`` itself."""
    if current_trace() is not None or x._device == device:
        return x
    return nn_ops.to_device(x, device=str(device))
