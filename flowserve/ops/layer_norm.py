"""Layer normalisation as one primitive with a closed-form gradient.

``layer_norm_stats(x, weight, bias, eps, dims)`` normalises over the trailing ``dims``
dims and returns ``(y, mean, rstd)``: ``mean`` and ``rstd = 1 / sqrt(var + eps)`` (biased
variance) per row, shaped like ``x`` with the normalised dims kept as 1, as ONNX's
``LayerNormalization`` returns them. Written with primitives, a layer norm is about a
dozen ops forward and twice that backward; as one primitive its forward lowers to one
``LayerNormalization`` node and its gradient, with ``n`` values per row,
``x̂ = (x - mean) * rstd`` and ``h = g * weight``, is::

    dy/dx . g = rstd * (h - sum(h) / n - x̂ * sum(h * x̂) / n)
    dy/dweight . g = sum over rows of g * x̂,   dy/dbias . g = sum over rows of g

The gradient is written with flowserve ops, so it is itself differentiable.
"""

from __future__ import annotations

import math

from flowserve.ops import functional
from flowserve.ops.registry import Meta, fail_dtype, fail_shape, primitive


def _meta(x: Meta, weight: Meta, bias: Meta, eps: float, dims: int):
    trailing = tuple(x.shape[x.ndim - dims:])
    if dims < 1 or x.ndim < dims:
        fail_shape("layer_norm", f"an input with at least {dims} dims to normalise", tuple(x.shape))
    if not x.dtype.is_floating_point:
        fail_dtype("layer_norm", "a floating point input", x.dtype)
    for name, m in (("weight", weight), ("bias", bias)):
        if tuple(m.shape) != trailing:
            fail_shape("layer_norm", f"{name} of the normalised shape {trailing}", tuple(m.shape))
        if m.dtype is not x.dtype:
            fail_dtype("layer_norm", f"{name} of the input's dtype {x.dtype}", m.dtype)
    stat = Meta(tuple(x.shape[:x.ndim - dims]) + (1,) * dims, x.dtype)
    return x, stat, stat


def normalised_axes(ndim: int, dims: int) -> list:
    return list(range(ndim - dims, ndim))


def _vjp(ctx, g, g_mean=None, g_rstd=None):
    x, weight, _ = ctx.inputs
    _, mean, rstd = ctx.outputs
    dims = ctx.attrs["dims"]
    axes, leading = normalised_axes(x.ndim, dims), list(range(x.ndim - dims))
    n = math.prod(x.shape[x.ndim - dims:])
    d = x - mean
    gx = gw = gb = None
    if g is not None:
        xhat = d * rstd
        h = g * weight
        mean_h = functional.sum(h, axes, keepdim=True) * (1.0 / n)
        mean_hx = functional.sum(h * xhat, axes, keepdim=True) * (1.0 / n)
        gx = rstd * (h - mean_h - xhat * mean_hx)
        gw = functional.sum(g * xhat, leading) if leading else g * xhat
        gb = functional.sum(g, leading) if leading else g
    if g_mean is not None:  # d mean / dx = 1 / n
        term = functional.expand(g_mean * (1.0 / n), x.shape)
        gx = term if gx is None else gx + term
    if g_rstd is not None:  # d rstd / dx = -rstd^3 (x - mean) / n
        term = d * (g_rstd * rstd * rstd * rstd * (-1.0 / n))
        gx = term if gx is None else gx + term
    return gx, gw, gb


@primitive("layer_norm_stats", shape=_meta, vjp=_vjp, multiple_results=True)
def layer_norm_stats(xp, x, weight, bias, eps: float, dims: int):
    axes = tuple(range(x.ndim - dims, x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=x.dtype)
    d = x - mean
    var = xp.square(d).mean(axis=axes, keepdims=True, dtype=x.dtype)
    rstd = (1 / xp.sqrt(var + x.dtype.type(eps))).astype(x.dtype, copy=False)
    y = d * rstd
    y *= weight
    y += bias
    return y, mean, rstd
