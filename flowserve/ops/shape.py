"""Shape primitives: reshape, permute, expand, concat, slice. Attributes are JSON values."""

from __future__ import annotations

import math

from flowserve.ops.dims import BatchDim
from flowserve.ops.registry import Meta, broadcast_shapes, fail_dtype, fail_shape, primitive


def _reshape_meta(x: Meta, shape: list) -> Meta:
    if math.prod(shape) != math.prod(x.shape):
        fail_shape("reshape", f"a shape with {math.prod(x.shape)} elements", f"{tuple(shape)} for input {tuple(x.shape)}")
    return Meta(tuple(shape), x.dtype)


@primitive("reshape", shape=_reshape_meta, vjp=lambda ctx, g: (g.reshape(ctx.inputs[0].shape),))
def reshape(xp, x, shape: list):
    return x.reshape(shape)


def _permute_meta(x: Meta, perm: list) -> Meta:
    if sorted(perm) != list(range(x.ndim)):
        fail_shape("permute", f"a permutation of {list(range(x.ndim))}", perm)
    return Meta(tuple(x.shape[p] for p in perm), x.dtype)


def _permute_vjp(ctx, g):
    perm = ctx.attrs["perm"]
    return (g.permute([perm.index(i) for i in range(len(perm))]),)


@primitive("permute", shape=_permute_meta, vjp=_permute_vjp)
def permute(xp, x, perm: list):
    return xp.transpose(x, perm)


def _expand_meta(x: Meta, shape: list) -> Meta:
    if len(shape) < x.ndim or broadcast_shapes("expand", x.shape, shape) != tuple(shape):
        fail_shape("expand", f"a shape that {tuple(x.shape)} broadcasts to", tuple(shape))
    return Meta(tuple(shape), x.dtype)


# the engine sums a gradient back to its input's shape, so expand's vjp passes it on
@primitive("expand", shape=_expand_meta, vjp=lambda ctx, g: (g,))
def expand(xp, x, shape: list):
    return xp.broadcast_to(x, shape)


def _concat_meta(*xs: Meta, axis: int) -> Meta:
    first = xs[0]
    for x in xs[1:]:
        if x.dtype is not first.dtype:
            fail_dtype("cat", "tensors of one dtype", f"{first.dtype} and {x.dtype}")
        if x.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis):
            fail_shape("cat", f"tensors that match {tuple(first.shape)} except in dim {axis}", tuple(x.shape))
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return Meta(tuple(shape), first.dtype)


def _concat_vjp(ctx, g):
    axis, grads, start = ctx.attrs["axis"], [], 0
    for x in ctx.inputs:
        size = x.shape[axis]
        grads.append(slice_(g, starts=[start], ends=[start + size], axes=[axis], steps=[1]))
        start += size
    return tuple(grads)


@primitive("concat", shape=_concat_meta, vjp=_concat_vjp)
def concat(xp, *xs, axis: int):
    return xp.concatenate(xs, axis=axis)


def slice_shape(shape: tuple, starts: list, ends: list, axes: list, steps: list) -> tuple:
    out = list(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        symbolic = st == 1 and (isinstance(s, BatchDim) or isinstance(e, BatchDim))
        out[a] = (e - s if e >= s else 0) if symbolic else len(range(s, e, st))  # (ops.dims: x[1:] is B - 1)
    return tuple(out)


def _slice_meta(x: Meta, starts: list, ends: list, axes: list, steps: list) -> Meta:
    for a in axes:
        if not 0 <= a < x.ndim:
            fail_shape("slice", f"axes of a {x.ndim}-d tensor", axes)
    return Meta(slice_shape(x.shape, starts, ends, axes, steps), x.dtype)


def _slices(ndim, starts, ends, axes, steps):
    index = [slice(None)] * ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a] = slice(s, e, st)
    return tuple(index)


def _slice_vjp(ctx, g):
    x = ctx.inputs[0]
    return (slice_backward(g, shape=list(x.shape), **ctx.attrs),)


@primitive("slice", shape=_slice_meta, vjp=_slice_vjp)
def slice_(xp, x, starts: list, ends: list, axes: list, steps: list):
    return x[_slices(x.ndim, starts, ends, axes, steps)]


def _slice_backward_meta(g: Meta, shape: list, starts, ends, axes, steps) -> Meta:
    return Meta(tuple(shape), g.dtype)


def _slice_backward_vjp(ctx, gg):
    a = ctx.attrs
    return (slice_(gg, starts=a["starts"], ends=a["ends"], axes=a["axes"], steps=a["steps"]),)


@primitive("slice_backward", shape=_slice_backward_meta, vjp=_slice_backward_vjp)
def slice_backward(xp, g, shape: list, starts: list, ends: list, axes: list, steps: list):
    out = xp.zeros(shape, dtype=g.dtype)
    out[_slices(len(shape), starts, ends, axes, steps)] = g
    return out
