"""Reduction primitives. ``axes`` is always a sorted list of non-negative ints."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.ops.registry import Meta, fail_dtype, primitive


def reduced_shape(shape: tuple, axes: list, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_meta(x: Meta, axes: list, keepdims: bool) -> Meta:
    return Meta(reduced_shape(x.shape, axes, keepdims), x.dtype)


def _keep(g, ctx):
    """The output gradient reshaped as if the reduction had kept its dims."""
    x, axes = ctx.inputs[0], ctx.attrs["axes"]
    return g.reshape(reduced_shape(x.shape, axes, True))


@primitive("sum", shape=_reduce_meta, vjp=lambda ctx, g: (_keep(g, ctx).expand(ctx.inputs[0].shape),))
def sum_(xp, x, axes: list, keepdims: bool):
    return xp.sum(x, axis=tuple(axes), keepdims=keepdims, dtype=x.dtype)


def _amax_vjp(ctx, g):
    x, axes = ctx.inputs[0], ctx.attrs["axes"]
    out = _keep(ctx.outputs[0], ctx)
    mask = (x == out).to(g.dtype)
    return (_keep(g, ctx) * mask / mask.sum(axes, keepdim=True),)


@primitive("amax", shape=_reduce_meta, vjp=_amax_vjp)
def amax(xp, x, axes: list, keepdims: bool):
    return xp.max(x, axis=tuple(axes), keepdims=keepdims)


@primitive("amin", shape=_reduce_meta, vjp=_amax_vjp)
def amin(xp, x, axes: list, keepdims: bool):
    return xp.min(x, axis=tuple(axes), keepdims=keepdims)


def _arg_meta(x: Meta, axis: int, keepdims: bool) -> Meta:
    if x.dtype is dtypes.bool_:
        fail_dtype("argmax", "a numeric tensor", x.dtype)
    return Meta(reduced_shape(x.shape, [axis], keepdims), dtypes.int64)


@primitive("argmax", shape=_arg_meta, differentiable=False)
def argmax(xp, x, axis: int, keepdims: bool):
    return xp.argmax(x, axis=axis, keepdims=keepdims).astype(xp.int64)


@primitive("argmin", shape=_arg_meta, differentiable=False)
def argmin(xp, x, axis: int, keepdims: bool):
    return xp.argmin(x, axis=axis, keepdims=keepdims).astype(xp.int64)
