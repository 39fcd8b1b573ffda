"""PyTorch functions that are short composites of the registry's ops (no kernels or lowerings
of their own, so eager mode, tracing, autodiff and export need nothing more): ``divide``,
``diff``, ``meshgrid``, and the names ``bench/api_coverage.py`` found missing that model code
uses (NumPy-style aliases, stacking, ``addmm``/``lerp`` family, ``logaddexp``, ``nan_to_num``, ...).

>>> import flowserve as flow
>>> flow.diff(flow.tensor([1.0, 4.0, 9.0, 16.0])).tolist()
[3.0, 5.0, 7.0]
>>> [g.tolist() for g in flow.meshgrid(flow.tensor([1, 2]), flow.tensor([3, 4, 5]), indexing="ij")]
[[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]
"""

from __future__ import annotations

import math

import numpy as np

from flowserve import dtypes
from flowserve.ops import core_functions
from flowserve.ops import indexing_functions
from flowserve.ops import math_functions
from flowserve.ops.registry import fail_shape
from flowserve.tensor import from_array

divide = math_functions.div  # torch.divide(a, b, rounding_mode=None | "trunc" | "floor"): div's other name


def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None):  # noqa: A002
    """The ``n``-th forward difference along ``dim``: ``out[i] = x[i + 1] - x[i]``, after
    ``prepend``/``append`` are joined on (``torch.diff``); booleans differ by ``!=``."""
    if n < 0:
        raise ValueError(f"diff expected order n >= 0, got {n}")
    if input.ndim == 0:
        fail_shape("diff", "an input of at least 1 dimension", tuple(input.shape))
    dim = dim % input.ndim
    pieces = [p for p in (prepend, input, append) if p is not None]
    if any(p.ndim != input.ndim for p in pieces):
        fail_shape("diff", f"prepend/append with the same number of dimensions as the input ({input.ndim})",
                   tuple(next(p.shape for p in pieces if p.ndim != input.ndim)))
    x = core_functions.cat(pieces, dim) if len(pieces) > 1 else input
    for _ in range(n):
        length = x.shape[dim] - 1
        if length <= 0:
            return indexing_functions.narrow(x, dim, 0, 0)
        after, before = indexing_functions.narrow(x, dim, 1, length), indexing_functions.narrow(x, dim, 0, length)
        x = core_functions.ne(after, before) if x.dtype.name == "bool" else core_functions.sub(after, before)
    return x


def _with(shape, dim: int, size: int) -> tuple:
    return tuple(size if i == dim else s for i, s in enumerate(shape))


def meshgrid(*tensors, indexing: str = "ij"):
    """Coordinate grids from 1-d tensors (``torch.meshgrid``): with ``indexing="ij"`` grid ``i``
    varies along dimension ``i``; ``"xy"`` swaps the first two (NumPy's/MATLAB's layout)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid expected indexing 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        if t.ndim > 1:
            fail_shape("meshgrid", "0-d or 1-d tensors", tuple(t.shape))
    flat = [core_functions.reshape(t, (-1,)) for t in tensors]
    swap = indexing == "xy" and len(flat) >= 2
    order = [1, 0] + list(range(2, len(flat))) if swap else list(range(len(flat)))
    shape = tuple(flat[i].shape[0] for i in order)
    ones = (1,) * len(flat)
    return tuple(
        core_functions.expand(core_functions.reshape(t, _with(ones, order.index(k), -1)), shape)
        for k, t in enumerate(flat)
    )


# -- other names of existing functions (NumPy's and the Python Array API's spellings) ----------

absolute, multiply, subtract, negative = core_functions.abs, core_functions.mul, core_functions.sub, core_functions.neg
greater, greater_equal, less, less_equal, not_equal = (
    core_functions.gt,
    core_functions.ge,
    core_functions.lt,
    core_functions.le,
    core_functions.ne,
)
concatenate, swapaxes, swapdims = core_functions.cat, core_functions.transpose, core_functions.transpose


def positive(input):  # noqa: A002
    return input


def clamp_min(input, min):  # noqa: A002
    return core_functions.clamp(input, min=min)


def clamp_max(input, max):  # noqa: A002
    return core_functions.clamp(input, max=max)


# -- shapes -------------------------------------------------------------------------------------

def movedim(input, source, destination):  # noqa: A002
    """Move dimensions ``source`` to positions ``destination``, the others keeping their order."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src, dst = [d % input.ndim for d in src], [d % input.ndim for d in dst]
    rest = iter(d for d in range(input.ndim) if d not in src)
    placed = dict(zip(dst, src))
    return core_functions.permute(input, [placed[i] if i in placed else next(rest) for i in range(input.ndim)])


moveaxis = movedim


def ravel(input):  # noqa: A002
    return core_functions.reshape(input, (-1,))


def unflatten(input, dim: int, sizes):  # noqa: A002
    dim = dim % input.ndim
    return core_functions.reshape(input, tuple(input.shape[:dim]) + tuple(sizes) + tuple(input.shape[dim + 1:]))


def fliplr(input):  # noqa: A002
    return indexing_functions.flip(input, [1])


def flipud(input):  # noqa: A002
    return indexing_functions.flip(input, [0])


def _atleast(tensors, ndim: int, where: tuple):
    one = len(tensors) == 1 and not isinstance(tensors[0], (list, tuple))
    items = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    out = []
    for t in items:
        shape = tuple(t.shape)
        if len(shape) < ndim:
            shape = where[len(shape)](shape)
        out.append(core_functions.reshape(t, shape))
    return out[0] if one else tuple(out)


def atleast_1d(*tensors):
    return _atleast(tensors, 1, {0: lambda s: (1,)})


def atleast_2d(*tensors):
    return _atleast(tensors, 2, {0: lambda s: (1, 1), 1: lambda s: (1,) + s})


def atleast_3d(*tensors):
    return _atleast(tensors, 3, {0: lambda s: (1, 1, 1), 1: lambda s: (1,) + s + (1,), 2: lambda s: s + (1,)})


def hstack(tensors):
    tensors = atleast_1d(*tensors) if len(tensors) != 1 else (atleast_1d(tensors[0]),)
    return core_functions.cat(list(tensors), 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    return core_functions.cat(list(atleast_2d(*tensors)) if len(tensors) != 1 else [atleast_2d(tensors[0])], 0)


row_stack = vstack


def dstack(tensors):
    return core_functions.cat(list(atleast_3d(*tensors)) if len(tensors) != 1 else [atleast_3d(tensors[0])], 2)


def column_stack(tensors):
    return hstack([core_functions.reshape(t, (-1, 1)) if t.ndim <= 1 else t for t in tensors])


def broadcast_tensors(*tensors):
    shape = np.broadcast_shapes(*[tuple(t.shape) for t in tensors])
    return tuple(core_functions.expand(t, shape) for t in tensors)


def cartesian_prod(*tensors):
    """Every combination of the 1-d tensors' elements, one per row (``itertools.product``'s order)."""
    if len(tensors) == 1:
        return tensors[0]
    return core_functions.stack([ravel(g) for g in meshgrid(*tensors, indexing="ij")], 1)


def tril_indices(row: int, col: int, offset: int = 0, dtype=dtypes.int64, device=None):
    return from_array(np.stack(np.tril_indices(row, offset, col)), dtype=dtype, device=device)


def triu_indices(row: int, col: int, offset: int = 0, dtype=dtypes.int64, device=None):
    return from_array(np.stack(np.triu_indices(row, offset, col)), dtype=dtype, device=device)


# -- arithmetic ---------------------------------------------------------------------------------

def addmm(input, mat1, mat2, *, beta=1, alpha=1):  # noqa: A002
    """``beta * input + alpha * mat1 @ mat2``."""
    return _scaled(input, beta) + _scaled(core_functions.matmul(mat1, mat2), alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    return _scaled(input, beta) + _scaled(math_functions.bmm(batch1, batch2), alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):  # noqa: A002
    return _scaled(input, beta) + _scaled(core_functions.matmul(mat, vec), alpha)


def addcmul(input, tensor1, tensor2, *, value=1):  # noqa: A002
    return input + _scaled(tensor1 * tensor2, value)


def addcdiv(input, tensor1, tensor2, *, value=1):  # noqa: A002
    return input + _scaled(tensor1 / tensor2, value)


def _scaled(x, factor):
    return x if factor == 1 else x * factor


def lerp(input, end, weight):  # noqa: A002
    """``input + weight * (end - input)``, rounded as PyTorch's kernel (from ``end`` for weight >= 0.5)."""
    if isinstance(weight, (int, float)):
        return input + (end - input) * weight if weight < 0.5 else end - (end - input) * (1 - weight)
    return indexing_functions.where(weight < 0.5, input + (end - input) * weight, end - (end - input) * (1 - weight))


def mv(input, vec):  # noqa: A002
    return core_functions.matmul(input, vec)


def inner(input, other):  # noqa: A002
    return (
        core_functions.sum(core_functions.unsqueeze(input, -2) * other, -1)
        if input.ndim and other.ndim
        else input * other
    )


def vdot(input, other):  # noqa: A002
    return math_functions.dot(input, other)


def trace(input):  # noqa: A002
    n = min(input.shape)
    index = from_array(np.arange(n).reshape(n, 1), device=input.device)
    return core_functions.sum(indexing_functions.gather(indexing_functions.narrow(input, 0, 0, n), 1, index))


def sinh(input):  # noqa: A002
    return (core_functions.exp(input) - core_functions.exp(-input)) * 0.5


def cosh(input):  # noqa: A002
    return (core_functions.exp(input) + core_functions.exp(-input)) * 0.5


def deg2rad(input):  # noqa: A002
    return input * (math.pi / 180.0)


def rad2deg(input):  # noqa: A002
    return input * (180.0 / math.pi)


def logaddexp(input, other):  # noqa: A002
    """``log(exp(a) + exp(b))`` without overflow."""
    top = core_functions.maximum(input, other)
    return top + math_functions.log1p(core_functions.exp(-core_functions.abs(input - other)))


def logaddexp2(input, other):  # noqa: A002
    return logaddexp(input * math.log(2.0), other * math.log(2.0)) * (1.0 / math.log(2.0))


def hypot(input, other):  # noqa: A002
    return core_functions.sqrt(input * input + other * other)


def logit(input, eps=None):  # noqa: A002
    x = core_functions.clamp(input, eps, 1 - eps) if eps is not None else input
    return core_functions.log(x / (1 - x))


def xlogy(input, other):  # noqa: A002
    """``input * log(other)``, 0 where ``input`` is 0 (and ``other`` is not nan)."""
    out = input * core_functions.log(other)
    return indexing_functions.where((input == 0) & ~math_functions.isnan(other), out * 0, out)


def nan_to_num(input, nan: float = 0.0, posinf=None, neginf=None):  # noqa: A002
    if not input.dtype.is_floating_point:
        return input
    info = np.finfo(np.float32 if input.dtype.name == "bfloat16" else input.dtype.name)
    out = indexing_functions.where(math_functions.isnan(input), nan, input)
    out = indexing_functions.where(out == math.inf, float(info.max) if posinf is None else posinf, out)
    return indexing_functions.where(out == -math.inf, float(info.min) if neginf is None else neginf, out)


def nansum(input, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    return core_functions.sum(indexing_functions.where(math_functions.isnan(input), 0.0, input), dim, keepdim, dtype)


def nanmean(input, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    valid = core_functions.cast(~math_functions.isnan(input), input.dtype)
    return nansum(input, dim, keepdim, dtype=dtype) / core_functions.sum(valid, dim, keepdim)


def count_nonzero(input, dim=None):  # noqa: A002
    return core_functions.sum(core_functions.cast(input != 0, dtypes.int64), dim)


def get_default_dtype():
    return dtypes.default_float


def is_floating_point(input) -> bool:  # noqa: A002
    return input.dtype.is_floating_point


def is_complex(input) -> bool:  # noqa: A002
    return False  # flowserve has no complex dtypes


def is_nonzero(input) -> bool:  # noqa: A002
    if input.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item())


__all__ = [
    "divide", "diff", "meshgrid", "absolute", "multiply", "subtract", "negative", "greater", "greater_equal",
    "less", "less_equal", "not_equal", "concatenate", "swapaxes", "swapdims", "positive", "clamp_min", "clamp_max",
    "movedim", "moveaxis", "ravel", "unflatten", "fliplr", "flipud", "atleast_1d", "atleast_2d", "atleast_3d",
    "hstack", "vstack", "row_stack", "dstack", "column_stack", "broadcast_tensors", "cartesian_prod",
    "tril_indices", "triu_indices", "addmm", "baddbmm", "addmv", "addcmul", "addcdiv", "lerp", "mv", "inner",
    "vdot", "trace", "sinh", "cosh", "deg2rad", "rad2deg", "logaddexp", "logaddexp2", "hypot", "logit", "xlogy",
    "nan_to_num", "nansum", "nanmean", "count_nonzero", "get_default_dtype", "is_floating_point", "is_complex",
    "is_nonzero",
]
