"""Fake quantization: round to an integer grid and back, in floating point.

``fake_quant(x, scale, zero_point, quant_min, quant_max, axis)`` computes, as ONNX's
``QuantizeLinear`` + ``DequantizeLinear`` (the int8 export, and a graph's lowering)::

    q = clamp(round_half_even(x / scale) + zero_point, quant_min, quant_max)
    y = (q - zero_point) * scale

``torch.fake_quantize_per_tensor_affine`` / ``..._per_channel_affine`` round
``x * (1 / scale)`` instead, two roundings where this is one: the results part by one step
on the few elements whose ``x / scale`` lies within an ulp of a .5 tie (frequent only where a
value already on one grid is quantized onto another: an activation quantized again by the
next layer), everywhere else they are equal. Eager mode, graphs and the exported model
round alike, the deployment's way.

per tensor (``axis=None``: ``scale`` and ``zero_point`` of shape ``()`` or ``(1,)``) or per
channel along ``axis`` (shape ``(x.shape[axis],)``). ``zero_point`` holds integers in ``x``'s
dtype. The gradient is the straight-through estimator with PyTorch's mask: ``x``'s gradient
passes where the unclamped ``q`` lies in ``[quant_min, quant_max]`` and is zero elsewhere;
``scale`` and ``zero_point`` get none (observers set them).

Its ONNX lowering (``flowserve.onnx_backend.lowering.fake_quant``) is ``QuantizeLinear`` +
``DequantizeLinear``, the QDQ form ONNX Runtime runs as integer kernels once exported.
"""

from __future__ import annotations

from flowserve.ops import functional as F
from flowserve.ops.registry import Meta, fail_dtype, fail_shape, normalize_axis, primitive

QUANTIZE_PRIMITIVES = frozenset({"fake_quant"})  # kept by the exporter's constant folding


def qparam_shape(x_shape: tuple, axis) -> list:
    """The shape that broadcasts per-channel parameters against ``x`` (``[1]*ndim`` per tensor)."""
    shape = [1] * len(x_shape)
    if axis is not None:
        shape[axis] = x_shape[axis]
    return shape


def _meta(x: Meta, scale: Meta, zero_point: Meta, quant_min: int, quant_max: int, axis=None) -> Meta:
    if not x.dtype.is_floating_point:
        fail_dtype("fake_quant", "a floating point input", x.dtype)
    for name, m in (("scale", scale), ("zero_point", zero_point)):
        if m.dtype is not x.dtype:
            fail_dtype("fake_quant", f"{name} of the input's dtype {x.dtype}", m.dtype)
    if not quant_min <= 0 <= quant_max or quant_min == quant_max:
        fail_shape("fake_quant", "quant_min <= 0 <= quant_max, quant_min < quant_max", (quant_min, quant_max))
    if axis is None:
        expected = ((), (1,))
    else:
        axis = normalize_axis("fake_quant", axis, x.ndim)
        expected = ((x.shape[axis],),)
    for name, m in (("scale", scale), ("zero_point", zero_point)):
        if tuple(m.shape) not in expected:
            where = "per tensor" if axis is None else f"per channel along dim {axis} of {tuple(x.shape)}"
            fail_shape("fake_quant", f"{name} of shape {' or '.join(map(str, expected))} ({where})",
                       tuple(m.shape))
    return x


def _params(x, scale, zero_point, axis):
    shape = qparam_shape(x.shape, None if axis is None else axis % x.ndim)
    return scale.reshape(shape), zero_point.reshape(shape)


def _vjp(ctx, g):
    x, scale, zero_point = ctx.inputs
    axis = ctx.attrs.get("axis")
    shape = qparam_shape(tuple(x.shape), None if axis is None else axis % x.ndim)
    q = F.round(x / F.reshape(scale, shape)) + F.reshape(zero_point, shape)
    inside = F.logical_and(F.ge(q, float(ctx.attrs["quant_min"])), F.le(q, float(ctx.attrs["quant_max"])))
    return g * F.cast(inside, g.dtype), None, None


@primitive("fake_quant", shape=_meta, vjp=_vjp)
def fake_quant(xp, x, scale, zero_point, quant_min: int, quant_max: int, axis=None):
    q = quantize_array(xp, x, scale, zero_point, quant_min, quant_max, axis)
    scale, zero_point = _params(x, scale, zero_point, axis)
    return ((q - zero_point) * scale).astype(x.dtype, copy=False)


def quantize_array(xp, x, scale, zero_point, quant_min: int, quant_max: int, axis=None):
    """The integers ``fake_quant`` rounds ``x`` to (``q`` above), as float values of ``x``'s
    dtype: what an exported model stores for a constant (a weight)."""
    scale, zero_point = _params(x, scale, zero_point, axis)
    return xp.clip(xp.rint(x / scale.astype(x.dtype, copy=False)) + zero_point, quant_min, quant_max)
