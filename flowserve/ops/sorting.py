"""Ordering primitives: ``topk`` (which also gives ``sort``/``argsort`` with k = n) and
``cumsum``. Public functions are in ``flowserve.ops.indexing_functions``."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.ops.indexing import scatter_add
from flowserve.ops.registry import Meta, fail_dtype, fail_shape, normalize_axis, primitive


def _topk_meta(x: Meta, k: int, axis: int, largest: bool):
    if x.ndim == 0:
        fail_shape("topk", "an input of at least 1 dimension", "a 0-d tensor")
    normalize_axis("topk", axis, x.ndim)
    if not 0 <= k <= x.shape[axis]:
        fail_shape("topk", f"k in [0, {x.shape[axis]}] (the size of dim {axis})", f"k={k}")
    shape = list(x.shape)
    shape[axis] = k
    return Meta(tuple(shape), x.dtype), Meta(tuple(shape), dtypes.int64)


def _topk_vjp(ctx, g_values, g_indices=None):
    x, indices = ctx.inputs[0], ctx.outputs[1]
    zeros = g_values.new_zeros(()).expand(x.shape)
    return (scatter_add(zeros, indices, g_values, axis=ctx.attrs["axis"]),)


@primitive("topk", shape=_topk_meta, vjp=_topk_vjp, multiple_results=True)
def topk(xp, x, k: int, axis: int, largest: bool):
    """The ``k`` largest (or smallest) entries along ``axis``, sorted; ties keep the lower
    index first (stable, as ONNX TopK)."""
    if not 0 <= k <= x.shape[axis]:
        raise ValueError("k out of range")  # the shape rule then explains
    keys = x
    if largest:
        if x.dtype.kind in "bu":
            keys = x.astype(xp.int64)
        keys = -keys
    order = xp.argsort(keys, axis=axis, kind="stable")
    order = xp.take(order, xp.arange(k), axis=axis)
    return xp.take_along_axis(x, order, axis=axis), order.astype(xp.int64)


def _cumsum_meta(x: Meta, axis: int, reverse: bool) -> Meta:
    if x.dtype is dtypes.bool_:
        fail_dtype("cumsum", "a numeric tensor", x.dtype)
    normalize_axis("cumsum", axis, max(x.ndim, 1))
    return x


def _cumsum_vjp(ctx, g):
    a = ctx.attrs
    return (cumsum(g, axis=a["axis"], reverse=not a["reverse"]),)


@primitive("cumsum", shape=_cumsum_meta, vjp=_cumsum_vjp)
def cumsum(xp, x, axis: int, reverse: bool):
    """Running sums along ``axis``; ``reverse`` sums from the end (ONNX CumSum)."""
    if x.ndim == 0:
        return x.copy()
    if reverse:
        flipped = xp.flip(x, axis=axis)
        return xp.flip(xp.cumsum(flipped, axis=axis, dtype=x.dtype), axis=axis)
    return xp.cumsum(x, axis=axis, dtype=x.dtype)
