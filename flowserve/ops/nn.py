"""Neural-network primitives: matmul, softmax family, one-hot."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.device import as_device, to_device_array
from flowserve.ops.registry import Meta, broadcast_shapes, fail_dtype, fail_shape, normalize_axis, primitive


def _matmul_meta(a: Meta, b: Meta) -> Meta:
    if a.dtype is not b.dtype:
        fail_dtype("matmul", "inputs of one dtype", f"{a.dtype} and {b.dtype}")
    if a.ndim == 0 or b.ndim == 0:
        fail_shape("matmul", "inputs of at least 1 dimension", f"{tuple(a.shape)} and {tuple(b.shape)}")
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        fail_shape("matmul", f"the second input to have {k_a} rows (as input one has columns)",
                   f"{tuple(a.shape)} @ {tuple(b.shape)}")
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    rows = (a.shape[-2],) if a.ndim > 1 else ()
    cols = (b.shape[-1],) if b.ndim > 1 else ()
    return Meta(batch + rows + cols, a.dtype)


def _matmul_vjp(ctx, g):
    a, b = ctx.inputs
    a2 = a if a.ndim > 1 else a.unsqueeze(0)
    b2 = b if b.ndim > 1 else b.unsqueeze(-1)
    g2 = g
    if b.ndim == 1:  # (..., rows) -> (..., rows, 1); a vector-vector product's 0-d g -> (1,)
        g2 = g2.unsqueeze(-1)
    if a.ndim == 1:
        g2 = g2.unsqueeze(-2)
    ga = (g2 @ b2.mT).sum_to(a2.shape).reshape(a.shape) if ctx.needs(0) else None
    gb = (a2.mT @ g2).sum_to(b2.shape).reshape(b.shape) if ctx.needs(1) else None
    return ga, gb


@primitive("matmul", shape=_matmul_meta, vjp=_matmul_vjp)
def matmul(xp, a, b):
    return xp.matmul(a, b)


def _softmax_meta(op: str):
    def rule(x: Meta, axis: int) -> Meta:
        if not x.dtype.is_floating_point:
            fail_dtype(op, "a floating point tensor", x.dtype)
        normalize_axis(op, axis, x.ndim)
        return x

    return rule


def _log_softmax_vjp(ctx, g):
    axis = ctx.attrs["axis"]
    return (g - ctx.outputs[0].exp() * g.sum(axis, keepdim=True),)


@primitive("log_softmax", shape=_softmax_meta("log_softmax"), vjp=_log_softmax_vjp)
def log_softmax(xp, x, axis: int):
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def _softmax_vjp(ctx, g):
    y, axis = ctx.outputs[0], ctx.attrs["axis"]
    return (y * (g - (g * y).sum(axis, keepdim=True)),)


@primitive("softmax", shape=_softmax_meta("softmax"), vjp=_softmax_vjp)
def softmax(xp, x, axis: int):
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _one_hot_meta(index: Meta, num_classes: int, dtype: str) -> Meta:
    if index.dtype.is_floating_point or index.dtype is dtypes.bool_:
        fail_dtype("one_hot", "an integer class-index tensor", index.dtype)
    return Meta(tuple(index.shape) + (num_classes,), dtypes.from_name(dtype))


@primitive("one_hot", shape=_one_hot_meta, differentiable=False)
def one_hot(xp, index, num_classes: int, dtype: str):
    if index.size and (index.min() < 0 or index.max() >= num_classes):
        raise IndexError(f"one_hot expected class indices in [0, {num_classes}), "
                         f"got values in [{int(index.min())}, {int(index.max())}]")
    return (index[..., None] == xp.arange(num_classes)).astype(dtypes.from_name(dtype).np)


@primitive("copy", shape=lambda x: x, vjp=lambda ctx, g: (g,))
def copy(xp, x):
    return x.copy()


def _to_device_vjp(ctx, g):
    return (to_device(g, device=str(ctx.inputs[0].device)),)


def _result_device(device: str):
    return as_device(device)


@primitive("to_device", shape=lambda x, device: x, vjp=_to_device_vjp, result_device=_result_device)
def to_device(xp, x, device: str):
    """A copy on ``device`` (a graph runs on one device: there it is the identity)."""
    return to_device_array(x, as_device(device))
