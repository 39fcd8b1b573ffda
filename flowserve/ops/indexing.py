"""Indexing primitives: ``gather``/``scatter``/``scatter_add`` along an axis (PyTorch's
``gather``, ``scatter``, ``scatter_add``) and ``take`` (numpy's ``take``, ONNX ``Gather``).

Advanced indexing, boolean masks and ``__setitem__`` are composites over these (see
``flowserve.ops.indexing_functions``), so they need no gradient or lowering of their own.
"""

from __future__ import annotations

from flowserve.ops.registry import Meta, fail_dtype, fail_shape, normalize_axis, primitive


def check_index_dtype(op: str, index: Meta) -> None:
    if index.dtype.is_floating_point or index.dtype.name == "bool":
        fail_dtype(op, "an int64 (or int32) index tensor", index.dtype)


def _along_axis_meta(op: str, x: Meta, index: Meta, axis: int) -> None:
    check_index_dtype(op, index)
    if index.ndim != x.ndim:
        fail_shape(op, f"an index with as many dims as the input ({x.ndim})", f"index {tuple(index.shape)}")
    normalize_axis(op, axis, x.ndim)
    for d, (n, i) in enumerate(zip(x.shape, index.shape)):
        if d != axis and i > n >= 0:
            fail_shape(op, f"index size <= input size {n} in dim {d}", f"index {tuple(index.shape)}")


def _check_bounds(op: str, index, size: int, axis: int) -> None:
    """Indices within ``[-size, size)`` (negative ones count from the end): numpy raises on
    others, CuPy would wrap them silently."""
    if index.size and (index.min() < -size or index.max() >= size):
        raise IndexError(f"{op} expected indices in [{-size}, {size}) for dim {axis}, "
                         f"got values in [{int(index.min())}, {int(index.max())}]")


def _open_grid(xp, index, axis: int, ndim: int) -> tuple:
    """numpy index tuple that addresses ``index``'s entries along ``axis`` of a tensor."""
    if index.ndim != ndim:
        raise ValueError("index and input differ in rank")  # the shape rule then explains
    grid = []
    for d, n in enumerate(index.shape):
        if d == axis:
            grid.append(index)
        else:
            shape = [1] * index.ndim
            shape[d] = n
            grid.append(xp.arange(n).reshape(shape))
    return tuple(grid)


def _gather_meta(x: Meta, index: Meta, axis: int) -> Meta:
    _along_axis_meta("gather", x, index, axis)
    return Meta(tuple(index.shape), x.dtype)


def _gather_vjp(ctx, g):
    x, index = ctx.inputs
    zeros = g.new_zeros(()).expand(x.shape)
    return (scatter_add(zeros, index, g, axis=ctx.attrs["axis"]), None)


@primitive("gather", shape=_gather_meta, vjp=_gather_vjp)
def gather(xp, x, index, axis: int):
    """``out[i][j] = x[index[i][j]][j]`` for axis 0 (PyTorch's ``gather``)."""
    _check_bounds("gather", index, x.shape[axis], axis)
    return x[_open_grid(xp, index, axis, x.ndim)]


def _scatter_meta(op: str):
    def rule(x: Meta, index: Meta, src: Meta, axis: int) -> Meta:
        _along_axis_meta(op, x, index, axis)
        if tuple(src.shape) != tuple(index.shape):
            fail_shape(op, f"src of the index's shape {tuple(index.shape)}", f"src {tuple(src.shape)}")
        if src.dtype is not x.dtype:
            fail_dtype(op, f"src of the input's dtype {x.dtype}", src.dtype)
        return x

    return rule


def _scatter_vjp(ctx, g):
    x, index, src = ctx.inputs
    axis = ctx.attrs["axis"]
    gx = scatter(g, index, g.new_zeros(()).expand(index.shape), axis=axis) if ctx.needs(0) else None
    gsrc = gather(g, index, axis=axis) if ctx.needs(2) else None
    return gx, None, gsrc


@primitive("scatter", shape=_scatter_meta("scatter"), vjp=_scatter_vjp)
def scatter(xp, x, index, src, axis: int):
    """``out = x`` with ``out[index[i][j]][j] = src[i][j]`` for axis 0."""
    if src.shape != index.shape:
        raise ValueError("src and index differ in shape")  # the shape rule then explains
    _check_bounds("scatter", index, x.shape[axis], axis)
    out = x.copy()
    out[_open_grid(xp, index, axis, x.ndim)] = src
    return out


def _scatter_add_vjp(ctx, g):
    index = ctx.inputs[1]
    gsrc = gather(g, index, axis=ctx.attrs["axis"]) if ctx.needs(2) else None
    return (g if ctx.needs(0) else None, None, gsrc)


@primitive("scatter_add", shape=_scatter_meta("scatter_add"), vjp=_scatter_add_vjp)
def scatter_add(xp, x, index, src, axis: int):
    """``out = x`` with ``out[index[i][j]][j] += src[i][j]`` for axis 0 (repeats add up)."""
    if src.shape != index.shape:
        raise ValueError("src and index differ in shape")
    _check_bounds("scatter_add", index, x.shape[axis], axis)
    out = x.copy()
    grid = _open_grid(xp, index, axis, x.ndim)
    if xp.__name__ == "numpy":
        xp.add.at(out, grid, src)
    else:
        import cupyx  # local: CuPy is optional

        cupyx.scatter_add(out, grid, src)
    return out


def _take_meta(x: Meta, index: Meta, axis: int) -> Meta:
    check_index_dtype("take", index)
    if x.ndim == 0:
        fail_shape("take", "an input of at least 1 dimension", "a 0-d tensor")
    normalize_axis("take", axis, x.ndim)
    return Meta(tuple(x.shape[:axis]) + tuple(index.shape) + tuple(x.shape[axis + 1:]), x.dtype)


def _take_vjp(ctx, g):
    x, index = ctx.inputs
    axis = ctx.attrs["axis"]
    n = index.numel()
    pre, post = list(x.shape[:axis]), list(x.shape[axis + 1:])
    g_flat = g.reshape(pre + [n] + post)
    idx = index.reshape([1] * len(pre) + [n] + [1] * len(post)).expand(g_flat.shape)
    zeros = g.new_zeros(()).expand(x.shape)
    return (scatter_add(zeros, idx, g_flat, axis=axis), None)


@primitive("take", shape=_take_meta, vjp=_take_vjp)
def take(xp, x, index, axis: int):
    """Whole slices of ``x`` along ``axis`` picked by ``index`` (numpy ``take``, ONNX Gather)."""
    _check_bounds("take", index, x.shape[axis], axis)
    return xp.take(x, index, axis=axis)
