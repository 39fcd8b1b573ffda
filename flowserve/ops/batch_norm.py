"""Training-mode batch normalisation as one primitive with a closed-form gradient.

``batch_norm_train(x, weight, bias, eps)`` normalises over every dim but the channel dim 1
with the batch's statistics and returns ``(y, mean, var)``: ``mean`` and the biased
``var`` per channel, from which ``flowserve.ops.norm.batch_norm`` updates the running
statistics (PyTorch's unbiased running variance). Written with primitives, the same
computation has a backward graph of dozens of full-tensor ops per layer; the closed form
below needs two reductions and five full-tensor ops::

    d = x - mean,  r = 1 / sqrt(var + eps),  k = r * weight,  n = values per channel
    dy/dx . g = k * (g - sum(g) / n - d * r^2 * sum(g * d) / n)
    dy/dweight . g = r * sum(g * d),   dy/dbias . g = sum(g)

The gradient is written with flowserve ops, so it is itself differentiable.
"""

from __future__ import annotations

from flowserve.ops import functional
from flowserve.ops.registry import Meta, fail_dtype, fail_shape, primitive


def _meta(x: Meta, weight: Meta, bias: Meta, eps: float):
    if x.ndim < 2:
        fail_shape("batch_norm", "input (N, C, ...)", tuple(x.shape))
    c = x.shape[1]
    for name, m in (("weight", weight), ("bias", bias)):
        if tuple(m.shape) != (c,):
            fail_shape("batch_norm", f"{name} of size ({c},) for input {tuple(x.shape)}", tuple(m.shape))
        if m.dtype is not x.dtype:
            fail_dtype("batch_norm", f"{name} of the input's dtype {x.dtype}", m.dtype)
    if not x.dtype.is_floating_point:
        fail_dtype("batch_norm", "a floating point input", x.dtype)
    stat = Meta((c,), x.dtype)
    return x, stat, stat


def reduce_axes(ndim: int) -> list:
    return [0] + list(range(2, ndim))


def channel_shape(x) -> list:
    return [1, x.shape[1]] + [1] * (x.ndim - 2)


def _vjp(ctx, g, g_mean=None, g_var=None):
    x, weight, _ = ctx.inputs
    _, mean, var = ctx.outputs
    axes, shape = reduce_axes(x.ndim), channel_shape(x)
    n = x.numel() // x.shape[1]
    r = functional.rsqrt(var + ctx.attrs["eps"])
    d = x - functional.reshape(mean, shape)
    gx = gw = gb = None
    if g is not None:
        sum_g = functional.sum(g, axes)
        sum_gd = functional.sum(g * d, axes)
        k = r * weight
        gx = g * functional.reshape(k, shape) + (d * functional.reshape(k * r * r * sum_gd * (-1.0 / n), shape)
                                        + functional.reshape(k * sum_g * (-1.0 / n), shape))
        gw, gb = sum_gd * r, sum_g
    if g_var is not None:  # d var / dx = 2 d / n
        term = d * functional.reshape(g_var * (2.0 / n), shape)
        gx = term if gx is None else gx + term
    if g_mean is not None:  # d mean / dx = 1 / n
        term = functional.reshape(g_mean * (1.0 / n), shape)
        gx = gx + term if gx is not None else functional.expand(term, x.shape)
    return gx, gw, gb


@primitive("batch_norm_train", shape=_meta, vjp=_vjp, multiple_results=True)
def batch_norm_train(xp, x, weight, bias, eps: float):
    axes = tuple(reduce_axes(x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    mean = x.mean(axis=axes, keepdims=True, dtype=x.dtype)
    d = x - mean
    var = xp.square(d).mean(axis=axes, keepdims=True, dtype=x.dtype)
    scale = (weight.reshape(shape) / xp.sqrt(var + x.dtype.type(eps))).astype(x.dtype, copy=False)
    y = d * scale
    y += bias.reshape(shape)
    return y, mean.reshape(-1), var.reshape(-1)
