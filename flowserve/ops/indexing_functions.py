"""Public indexing, selection and ordering functions: advanced indexing and ``__setitem__``,
``gather``/``scatter``, ``masked_fill``, ``narrow``/``chunk``/``split``, ``repeat``, ``flip``,
``topk``/``sort``/``argsort``, ``cumsum`` and ``max``/``min`` with indices.

All are composites over the primitives of ``flowserve.ops.indexing``/``sorting`` and the
shape family, so they work eagerly, inside ``nn.Graph`` and in exported ONNX alike.

>>> import flowserve as flow
>>> x = flow.arange(6).reshape(2, 3)
>>> x[:, [2, 0]].tolist()
[[2, 0], [5, 3]]
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from flowserve import dtypes
from flowserve.errors import GraphError, ShapeError
from flowserve.ops import core_functions
from flowserve.ops import elementwise
from flowserve.ops import indexing as indexing_ops
from flowserve.ops import sorting as sorting_ops
from flowserve.ops.dims import BatchDim
from flowserve.ops.registry import current_trace, fail_shape, normalize_axis
from flowserve.tensor import Tensor

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


# -- advanced indexing ---------------------------------------------------------------------------


def _is_bool_index(k) -> bool:
    if isinstance(k, Tensor):
        return k.dtype is dtypes.bool_
    return isinstance(k, (list, np.ndarray)) and np.asarray(k).dtype == np.bool_


def _on_device_of(t: Tensor, like: Tensor) -> Tensor:
    """``t`` (an index, mask or value tensor, often made from a numpy array on the CPU) on
    ``like``'s device; ``t`` itself where it is there already, and while tracing (a graph
    runs on one device)."""
    return core_functions.to_device(t, like.device)


def _index_tensor(array, like: Tensor) -> Tensor:
    """An int64 index tensor of the numpy ``array`` on ``like``'s device."""
    return _on_device_of(core_functions.as_tensor(np.asarray(array, dtype=np.int64)), like)


def _mask_indices(mask, like: Tensor) -> list:
    """The int64 index tensors of a boolean mask's True entries, on ``like``'s device (eager
    only: the count is data)."""
    if isinstance(mask, Tensor) and mask.is_lazy:
        raise GraphError(
            f"indexing with a boolean mask (size={tuple(mask.shape)}) gives a data-dependent shape, "
            "which nn.Graph cannot trace; use flow.where(mask, x, y) or x.masked_fill(mask, v)")
    arr = mask.numpy() if isinstance(mask, Tensor) else np.asarray(mask)
    return [_index_tensor(a, like) for a in np.nonzero(arr)]


def _expand_key(x: Tensor, key: tuple) -> list:
    """Masks as index tensors, lists/arrays as tensors, ``...`` as slices."""
    out = []
    for k in key:
        if _is_bool_index(k):
            out.extend(_mask_indices(k, x))
        elif isinstance(k, (list, np.ndarray)):
            out.append(_index_tensor(k, x))
        else:
            out.append(k)
    real = sum(1 for k in out if k is not None and k is not Ellipsis)
    if real > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    ellipses = [i for i, k in enumerate(out) if k is Ellipsis]
    if ellipses:
        i = ellipses[0]
        out[i:i + 1] = [slice(None)] * (x.ndim - real)
    return out


def _wrap_index(index: Tensor, size: int, dim: int) -> Tensor:
    """Negative indices counted from the end; eager indices are checked against ``size``."""
    if index.dtype.is_floating_point or index.dtype is dtypes.bool_:
        raise IndexError(f"tensors used as indices must be long, int or bool, got {index.dtype}")
    if not index.is_lazy and index.numel():
        values = index.numpy()
        lo, hi = int(values.min()), int(values.max())
        if lo < -size or hi >= size:
            raise IndexError(f"index {hi if hi >= size else lo} is out of bounds for dimension {dim} with size {size}")
    index = core_functions.cast(index, dtypes.int64)
    return elementwise.where(core_functions.lt(index, 0), index + _size_value(size, index.device), index)


def _size_value(size, device):
    """``size`` as the wrap offset: the batch size of a trace is counted at run time (a sum
    of ones over the batch), so indexing along the batch stays batch-polymorphic."""
    if isinstance(size, BatchDim) and current_trace() is not None:
        return core_functions.sum(core_functions.expand(core_functions.scalar_tensor(1, dtypes.int64, device), [size]))
    return size


def advanced_getitem(x: Tensor, key: tuple) -> Tensor:
    """``x[key]`` where ``key`` holds tensors, lists, arrays or boolean masks (PyTorch's rules:
    ints and slices apply first; indexed dims that end up adjacent stay in place, otherwise
    the broadcast index dims come first)."""
    basic, adv, dim = [], [], 0
    for k in _expand_key(x, key):
        if isinstance(k, Tensor):
            adv.append((dim, k))
            basic.append(slice(None))
            dim += 1
        else:
            basic.append(k)
            dim += 0 if isinstance(k, int) and not isinstance(k, bool) else 1
    y = core_functions.getitem(x, tuple(basic))
    dims = [d for d, _ in adv]
    indices = [_wrap_index(_on_device_of(k, y), y.shape[d], d) for d, k in adv]
    if len(adv) == 1:
        return indexing_ops.take(y, indices[0], axis=dims[0])
    return _take_many(y, dims, indices)


def _take_many(y: Tensor, dims: list, indices: list) -> Tensor:
    """Index several dims of ``y`` at once: one ``take`` on their flattened product."""
    shape = tuple(np.broadcast_shapes(*[tuple(i.shape) for i in indices]))
    linear, stride = None, 1
    for d, index in reversed(list(zip(dims, indices))):
        term = index * stride if stride != 1 else index
        linear = term if linear is None else linear + term
        stride *= y.shape[d]
    rest = [d for d in range(y.ndim) if d not in dims]
    flat = core_functions.reshape(core_functions.permute(y, dims + rest), [stride] + [y.shape[d] for d in rest])
    out = indexing_ops.take(flat, core_functions.expand(linear, shape), axis=0)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if not adjacent or dims[0] == 0:
        return out
    n = len(shape)
    rest_dims = list(range(n, out.ndim))
    perm = rest_dims[:dims[0]] + list(range(n)) + rest_dims[dims[0]:]
    return core_functions.permute(out, perm)


def _mask_setitem(x: Tensor, mask: Tensor, value) -> Tensor:
    """``x[mask] = value`` for a mask over x's leading dims and one value: a ``where``."""
    m = core_functions.reshape(mask, list(mask.shape) + [1] * (x.ndim - mask.ndim))
    value = _on_device_of(core_functions.as_tensor(value, like=x), x)
    return elementwise.where(m, *core_functions.coerce(core_functions.cast(value, x.dtype), x))


def setitem(x: Tensor, key, value) -> None:
    """``x[key] = value``, a functional update of ``x`` (works inside ``nn.Graph`` too)."""
    if isinstance(key, Tensor) and key.dtype is dtypes.bool_ and key.ndim <= x.ndim and \
            tuple(key.shape) == tuple(x.shape[:key.ndim]) and _numel(value) == 1:
        x._assign(_mask_setitem(x, _on_device_of(key, x), value))
        return
    positions = getitem(core_functions.reshape(_index_tensor(np.arange(x.numel()), x), x.shape), key)
    value = core_functions.cast(_on_device_of(core_functions.as_tensor(value, like=x), x), x.dtype)
    while value.ndim > positions.ndim and value.shape[0] == 1:
        value = core_functions.reshape(value, value.shape[1:])
    try:
        value = core_functions.expand(value, positions.shape)
    except ShapeError:
        fail_shape("setitem", f"a value that broadcasts to the indexed size {tuple(positions.shape)}",
                   tuple(value.shape))
    flat = indexing_ops.scatter(
        core_functions.reshape(x, [-1]),
        core_functions.reshape(positions, [-1]),
        core_functions.reshape(value, [-1]),
        axis=0,
    )
    x._assign(core_functions.reshape(flat, x.shape))


def _numel(value) -> int:
    return value.numel() if isinstance(value, Tensor) else int(np.size(value))


# -- gather and scatter -------------------------------------------------------------------------


def gather(input, dim: int, index):  # noqa: A002 - PyTorch's argument names
    """``out[i][j] = input[index[i][j]][j]`` for ``dim=0`` (``torch.gather``)."""
    return indexing_ops.gather(input, index, axis=normalize_axis("gather", dim, input.ndim))


def take_along_dim(input, indices, dim: int):  # noqa: A002
    return gather(input, dim, indices)


def _src_like_index(op: str, input, index, src):
    src = core_functions.cast(core_functions.as_tensor(src, like=input), input.dtype)
    if src.ndim == 0:
        return core_functions.expand(src, index.shape)
    if src.ndim != index.ndim or any(s < i for s, i in zip(src.shape, index.shape)):
        fail_shape(op, f"src at least as large as the index {tuple(index.shape)}", tuple(src.shape))
    if tuple(src.shape) != tuple(index.shape):
        src = core_functions.getitem(src, tuple(slice(0, n) for n in index.shape))
    return src


def scatter(input, dim: int, index, src=None, value=None, reduce=None):  # noqa: A002
    """``out = input`` with ``out[index[i][j]][j] = src[i][j]`` for ``dim=0``; ``reduce="add"``
    adds instead (``torch.scatter``)."""
    src = value if src is None else src
    axis = normalize_axis("scatter", dim, input.ndim)
    src = _src_like_index("scatter", input, index, src)
    if reduce in ("add", "sum"):
        return indexing_ops.scatter_add(input, index, src, axis=axis)
    if reduce is not None:
        raise ValueError(f"scatter expected reduce None or 'add', got {reduce!r}")
    return indexing_ops.scatter(input, index, src, axis=axis)


def scatter_add(input, dim: int, index, src):  # noqa: A002
    """``out = input`` with ``out[index[i][j]][j] += src[i][j]`` for ``dim=0``."""
    axis = normalize_axis("scatter_add", dim, input.ndim)
    return indexing_ops.scatter_add(input, index, _src_like_index("scatter_add", input, index, src), axis=axis)


def index_select(input, dim: int, index):  # noqa: A002
    if index.ndim > 1:
        fail_shape("index_select", "a 0-d or 1-d index", tuple(index.shape))
    axis = normalize_axis("index_select", dim, input.ndim)
    return indexing_ops.take(
        input, _wrap_index(core_functions.reshape(index, [-1]), input.shape[axis], axis), axis=axis
    )


def _along(index, dim: int, shape) -> Tensor:
    """A 1-d index along ``dim``, expanded to ``shape`` for the along-axis primitives."""
    view = [1] * len(shape)
    view[dim] = index.shape[0] if index.ndim else 1
    return core_functions.expand(core_functions.reshape(core_functions.cast(index, dtypes.int64), view), shape)


def index_add(input, dim: int, index, source, alpha=1):  # noqa: A002
    """``input`` with ``alpha * source[i]`` added to slice ``index[i]`` along ``dim``."""
    axis = normalize_axis("index_add", dim, input.ndim)
    source = core_functions.cast(source if alpha == 1 else core_functions.mul(source, alpha), input.dtype)
    wrapped = _wrap_index(core_functions.reshape(index, [-1]), input.shape[axis], axis)
    return indexing_ops.scatter_add(input, _along(wrapped, axis, source.shape), source, axis=axis)


def index_copy(input, dim: int, index, source):  # noqa: A002
    axis = normalize_axis("index_copy", dim, input.ndim)
    wrapped = _wrap_index(core_functions.reshape(index, [-1]), input.shape[axis], axis)
    return indexing_ops.scatter(
        input, _along(wrapped, axis, source.shape), core_functions.cast(source, input.dtype), axis=axis
    )


def index_fill(input, dim: int, index, value):  # noqa: A002
    axis = normalize_axis("index_fill", dim, input.ndim)
    shape = list(input.shape)
    shape[axis] = index.numel()
    value = core_functions.expand(core_functions.cast(core_functions.as_tensor(value, like=input), input.dtype), shape)
    return index_copy(input, axis, index, value)


def masked_fill(input, mask, value):  # noqa: A002
    """``input`` with ``value`` where ``mask`` is True (``value`` takes input's dtype)."""
    if core_functions.as_tensor(mask).dtype is not dtypes.bool_:
        raise TypeError(f"masked_fill expected a bool mask, got {core_functions.as_tensor(mask).dtype}")
    value = core_functions.cast(_on_device_of(core_functions.as_tensor(value, like=input), input), input.dtype)
    return elementwise.where(_on_device_of(core_functions.as_tensor(mask), input), value, input)


def masked_select(input, mask):  # noqa: A002
    shape = tuple(np.broadcast_shapes(tuple(input.shape), tuple(mask.shape)))
    return advanced_getitem(core_functions.expand(input, shape), (core_functions.expand(mask, shape),))


def nonzero(input, as_tuple: bool = False):  # noqa: A002
    """Indices of the non-zero entries (eager only: their number depends on the data)."""
    found = _mask_indices(core_functions.ne(input, 0), input)
    if as_tuple:
        return tuple(found)
    if not found:
        return _index_tensor(np.zeros((0, 0)), input)
    return core_functions.stack(found, 1) if input.ndim else _index_tensor(np.zeros((int(input.item() != 0), 0)), input)


def argwhere(input):  # noqa: A002
    return nonzero(input)


# -- pieces and repeats ----------------------------------------------------------------------------


def narrow(input, dim: int, start: int, length: int):  # noqa: A002
    axis = normalize_axis("narrow", dim, input.ndim)
    size = input.shape[axis]
    start = start + size if start < 0 else start
    if not (0 <= start and start + length <= size and length >= 0):
        fail_shape("narrow", f"start + length <= {size} (size of dim {dim})", f"start={start}, length={length}")
    return core_functions.slice_axis(input, axis, start, start + length)


def split(tensor, split_size_or_sections, dim: int = 0):
    """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or of the given sizes."""
    axis = normalize_axis("split", dim, tensor.ndim)
    size = tensor.shape[axis]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sections = [min(step, size - s) for s in range(0, size, step)] if size else [0]
    else:
        sections = list(split_size_or_sections)
        if sum(sections) != size:
            fail_shape("split", f"sections that sum to {size} (size of dim {dim})", sections)
    out, start = [], 0
    for n in sections:
        out.append(core_functions.slice_axis(tensor, axis, start, start + n))
        start += n
    return tuple(out)


def chunk(input, chunks: int, dim: int = 0):  # noqa: A002
    axis = normalize_axis("chunk", dim, input.ndim)
    return split(input, max(1, math.ceil(input.shape[axis] / chunks)), axis)


def tensor_split(input, sections: int, dim: int = 0):  # noqa: A002
    axis = normalize_axis("tensor_split", dim, input.ndim)
    size = input.shape[axis]
    return split(input, [size // sections + (1 if i < size % sections else 0) for i in range(sections)], axis)


def unbind(input, dim: int = 0):  # noqa: A002
    axis = normalize_axis("unbind", dim, input.ndim)
    return tuple(core_functions.squeeze(piece, axis) for piece in split(input, 1, axis))


def repeat(input, *sizes):  # noqa: A002
    """``input`` tiled ``sizes[i]`` times along dim i (``Tensor.repeat``)."""
    sizes = list(core_functions._shape_arg(sizes))
    if len(sizes) < input.ndim:
        fail_shape("repeat", f"at least {input.ndim} repeat sizes (one per dim)", tuple(sizes))
    shape = [1] * (len(sizes) - input.ndim) + list(input.shape)
    interleaved = [n for s in shape for n in (1, s)]
    target = [n for r, s in zip(sizes, shape) for n in (r, s)]
    x = core_functions.expand(core_functions.reshape(input, interleaved), target)
    return core_functions.reshape(x, [r * s for r, s in zip(sizes, shape)])


def tile(input, dims):  # noqa: A002
    dims = list(dims)
    return repeat(input, [1] * (input.ndim - len(dims)) + dims)


def flip(input, dims):  # noqa: A002
    dims = [dims] if isinstance(dims, int) else list(dims)
    for d in dims:
        axis = normalize_axis("flip", d, input.ndim)
        n = input.shape[axis]
        input = indexing_ops.take(input, _index_tensor(np.arange(n - 1, -1, -1), input), axis=axis)
    return input


def roll(input, shifts, dims=None):  # noqa: A002
    if dims is None:
        return core_functions.reshape(roll(core_functions.reshape(input, [-1]), shifts, 0), input.shape)
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    for s, d in zip(shifts, dims):
        axis = normalize_axis("roll", d, input.ndim)
        n = input.shape[axis]
        order = (np.arange(n) - s) % max(n, 1)
        input = indexing_ops.take(input, _index_tensor(order, input), axis=axis)
    return input


def _triangle(input, diagonal: int, upper: bool):
    if input.ndim < 2:
        fail_shape("triu" if upper else "tril", "an input of at least 2 dims", tuple(input.shape))
    rows, cols = input.shape[-2:]
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    keep = offset >= diagonal if upper else offset <= diagonal
    zero = core_functions.scalar_tensor(0, input.dtype, input.device)
    return elementwise.where(_on_device_of(core_functions.as_tensor(keep), input), input, zero)


def tril(input, diagonal: int = 0):  # noqa: A002
    """Entries on and below the ``diagonal``-th diagonal of the last two dims; zeros above."""
    return _triangle(input, diagonal, upper=False)


def triu(input, diagonal: int = 0):  # noqa: A002
    return _triangle(input, diagonal, upper=True)


# -- ordering --------------------------------------------------------------------------------------


def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
    """The ``k`` largest (or smallest) entries along ``dim`` and their indices."""
    axis = normalize_axis("topk", dim, input.ndim)
    x = input if input.ndim else core_functions.reshape(input, [1])
    values, indices = sorting_ops.topk(x, k=int(k), axis=axis, largest=bool(largest))
    if not input.ndim:
        values, indices = core_functions.reshape(values, []), core_functions.reshape(indices, [])
    return ValuesIndices(values, indices)


def sort(input, dim: int = -1, descending: bool = False, stable: bool = False):  # noqa: A002
    """Sorted values and their indices along ``dim``; equal entries keep their order."""
    axis = normalize_axis("sort", dim, input.ndim)
    n = input.shape[axis] if input.ndim else 1
    return topk(input, n, axis, largest=descending)


def argsort(input, dim: int = -1, descending: bool = False, stable: bool = False):  # noqa: A002
    return sort(input, dim, descending, stable).indices


def msort(input):  # noqa: A002
    return sort(input, 0).values


def cumsum(input, dim: int, dtype=None):  # noqa: A002
    """Running sums along ``dim`` (integers and bools accumulate in int64, as PyTorch)."""
    x = core_functions.cast(input, dtype) if dtype is not None else core_functions._accumulate_dtype(input)
    return sorting_ops.cumsum(x, axis=normalize_axis("cumsum", dim, max(x.ndim, 1)), reverse=False)


def _with_indices(pick, input, dim, keepdim):
    axis = normalize_axis("max", dim, input.ndim)
    if input.ndim == 0:
        return ValuesIndices(input, _index_tensor(np.zeros(()), input))
    indices = pick(input, axis, keepdim=True)
    values = indexing_ops.gather(input, indices, axis=axis)
    if not keepdim:
        values, indices = core_functions.squeeze(values, axis), core_functions.squeeze(indices, axis)
    return ValuesIndices(values, indices)


def max_with_indices(input, dim: int, keepdim: bool = False):  # noqa: A002
    """``input.max(dim)``: the largest entries and their first index along ``dim``."""
    return _with_indices(core_functions.argmax, input, dim, keepdim)


def min_with_indices(input, dim: int, keepdim: bool = False):  # noqa: A002
    return _with_indices(core_functions.argmin, input, dim, keepdim)


def getitem(x: Tensor, key):
    """``x[key]``: ints, slices, ``None``, ``...`` and tensor (advanced) indices."""
    parts = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, (Tensor, list, np.ndarray)) for k in parts):
        return advanced_getitem(x, parts)
    return core_functions.getitem(x, parts)


def where(condition, x=None, y=None):
    """``flow.where(c, x, y)`` chooses elementwise; ``flow.where(c)`` is ``nonzero(c, as_tuple=True)``."""
    if x is None and y is None:
        return nonzero(condition, as_tuple=True)
    return core_functions.where(condition, x, y)


# the public names (``advanced_getitem``, ``setitem``, ``max_with_indices`` serve methods)
__all__ = [
    "ValuesIndices", "getitem", "where", "gather", "take_along_dim", "scatter", "scatter_add",
    "index_select", "index_add", "index_copy", "index_fill", "masked_fill", "masked_select",
    "nonzero", "argwhere", "narrow", "split", "chunk", "tensor_split", "unbind", "repeat", "tile",
    "flip", "roll", "tril", "triu", "topk", "sort", "argsort", "msort", "cumsum",
]
