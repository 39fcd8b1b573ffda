"""More of ``torch.nn.functional``, found missing by ``bench/api_coverage.py`` and used by model
code: shrink activations, ``softmin``, ``rms_norm``, 1-d pooling, power pooling, channel
shuffle, the margin/embedding/likelihood losses. Each is a composite of the registry's ops
(PyTorch's formula, its defaults and reductions), so tracing, autodiff and export need
nothing more.

>>> import flowserve as flow
>>> import flowserve.nn.functional as F
>>> F.softshrink(flow.tensor([-1.0, 0.2, 2.0])).tolist()
[-0.5, 0.0, 1.5]
"""

from __future__ import annotations

import math

import ml_dtypes

from flowserve.nn.functional_more import celu, pairwise_distance, selu, threshold
from flowserve.ops import math_functions
from flowserve.ops import functional as ops_functional
from flowserve.ops import pool
from flowserve.ops.activation import logsigmoid
from flowserve.ops.loss import reduce as _reduce
from flowserve.ops.registry import fail_shape


__all__ = [
    "adaptive_avg_pool1d", "avg_pool1d", "channel_shuffle", "cosine_embedding_loss", "gaussian_nll_loss",
    "bilinear", "celu_", "hardshrink", "hinge_embedding_loss", "prelu", "selu_", "threshold_", "lp_pool1d", "lp_pool2d", "margin_ranking_loss",
    "multilabel_soft_margin_loss", "poisson_nll_loss",
    "rms_norm", "soft_margin_loss", "softmin", "softshrink", "tanhshrink", "triplet_margin_loss",
    "upsample_bilinear", "upsample_nearest",
]


# -- activations and normalisation -------------------------------------------------------------

def softshrink(input, lambd: float = 0.5):  # noqa: A002
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, 0 between."""
    return ops_functional.where(input > lambd, input - lambd, ops_functional.where(input < -lambd, input + lambd, input * 0))


def hardshrink(input, lambd: float = 0.5):  # noqa: A002
    """``x`` where ``|x| > lambd``, else 0."""
    return ops_functional.where(ops_functional.abs(input) > lambd, input, input * 0)


def tanhshrink(input):  # noqa: A002
    return input - ops_functional.tanh(input)


def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):  # noqa: A002
    x = ops_functional.cast(-input, dtype) if dtype is not None else -input
    return ops_functional.softmax(x, -1 if dim is None else dim)


def rms_norm(input, normalized_shape, weight=None, eps=None):  # noqa: A002
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last ``len(normalized_shape)`` dimensions;
    ``eps`` defaults to the dtype's machine epsilon, as PyTorch's."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(shape):]) != shape:
        fail_shape("rms_norm", f"an input ending in {shape}", tuple(input.shape))
    eps = float(ml_dtypes.finfo(input.dtype.np).eps) if eps is None else eps
    dims = list(range(input.ndim - len(shape), input.ndim))
    out = input * ops_functional.rsqrt(ops_functional.mean(input * input, dims, keepdim=True) + eps)
    return out * weight if weight is not None else out


def prelu(input, weight):  # noqa: A002
    """``x`` where positive, ``weight * x`` elsewhere; ``weight`` one slope or one per channel (dim 1)."""
    if weight.numel() > 1:
        weight = ops_functional.reshape(weight, (-1,) + (1,) * (input.ndim - 2))
    return ops_functional.where(ops_functional.gt(input, 0), input, input * weight)


def selu_(input):  # noqa: A002
    return selu(input, inplace=True)


def celu_(input, alpha: float = 1.0):  # noqa: A002
    return celu(input, alpha, inplace=True)


def threshold_(input, threshold_value: float, value: float):  # noqa: A002
    return threshold(input, threshold_value, value, inplace=True)


def bilinear(input1, input2, weight, bias=None):
    """``y[..., o] = x1 @ weight[o] @ x2 + bias[o]`` (``torch.nn.functional.bilinear``)."""
    out = math_functions.einsum("...i,oij,...j->...o", input1, weight, input2)
    return out + bias if bias is not None else out


# -- pooling -------------------------------------------------------------------------------------

def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True):
    if input.ndim != 3:
        fail_shape("avg_pool1d", "input (N, C, L)", tuple(input.shape))
    first = lambda v: v if isinstance(v, int) else v[0]  # noqa: E731
    kernel = first(kernel_size)
    step = kernel if stride is None else first(stride)
    out = pool.avg_pool2d(ops_functional.unsqueeze(input, 2), (1, kernel), (1, step), (0, first(padding)), ceil_mode,
                          count_include_pad)
    return ops_functional.squeeze(out, 2)


def adaptive_avg_pool1d(input, output_size):  # noqa: A002
    if input.ndim not in (2, 3):
        fail_shape("adaptive_avg_pool1d", "input (N, C, L) or (C, L)", tuple(input.shape))
    size = output_size if isinstance(output_size, int) else output_size[0]
    return ops_functional.squeeze(pool.adaptive_avg_pool2d(ops_functional.unsqueeze(input, -2), (1, size)), -2)


def lp_pool2d(input, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):  # noqa: A002
    """``(sum over the window of x^p)^(1/p)`` (PyTorch's formula through average pooling)."""
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    sh, sw = (kh, kw) if stride is None else ((stride, stride) if isinstance(stride, int) else stride)
    out = pool.avg_pool2d(input ** norm_type, (kh, kw), (sh, sw), (0, 0), ceil_mode)
    return (ops_functional.sign(out) * ops_functional.relu(ops_functional.abs(out)) * (kh * kw)) ** (1.0 / norm_type)


def lp_pool1d(input, norm_type: float, kernel_size: int, stride=None, ceil_mode: bool = False):  # noqa: A002
    out = avg_pool1d(input ** norm_type, kernel_size, stride, 0, ceil_mode)
    return (ops_functional.sign(out) * ops_functional.relu(ops_functional.abs(out)) * kernel_size) ** (1.0 / norm_type)


def upsample_nearest(input, size=None, scale_factor=None):  # noqa: A002
    return pool.interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):  # noqa: A002
    return pool.interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def channel_shuffle(input, groups: int):  # noqa: A002
    """ShuffleNet's shuffle: ``(N, g*c, ...)`` viewed as ``(N, g, c, ...)``, transposed, flattened."""
    n, channels = input.shape[0], input.shape[1]
    rest = list(input.shape[2:])
    out = ops_functional.transpose(ops_functional.reshape(input, [n, groups, channels // groups] + rest), 1, 2)
    return ops_functional.reshape(out, [n, channels] + rest)


# -- losses --------------------------------------------------------------------------------------

def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                        reduction: str = "mean"):
    return _reduce(ops_functional.clamp(-target * (input1 - input2) + margin, min=0.0), reduction, "margin_ranking_loss")


def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,  # noqa: A002
                         reduction: str = "mean"):
    zero = input * 0
    loss = ops_functional.where(target == 1, input, zero) + ops_functional.where(target == -1, ops_functional.clamp(margin - input, min=0.0), zero)
    return _reduce(loss, reduction, "hinge_embedding_loss")


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):  # noqa: A002
    return _reduce(ops_functional.log(1 + ops_functional.exp(-target * input)), reduction, "soft_margin_loss")


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                          reduction: str = "mean"):
    """``1 - cos`` for pairs labelled 1, ``max(0, cos - margin)`` for pairs labelled -1."""
    eps = 1e-12  # PyTorch's EPSILON
    dot = ops_functional.sum(input1 * input2, -1)
    cos = dot / ops_functional.sqrt((ops_functional.sum(input1 * input1, -1) + eps) * (ops_functional.sum(input2 * input2, -1) + eps))
    zero = cos * 0
    loss = ops_functional.where(target == 1, 1 - cos, zero) + ops_functional.where(target == -1, ops_functional.clamp(cos - margin, min=0.0), zero)
    return _reduce(loss, reduction, "cosine_embedding_loss")


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average=None, reduce=None, reduction: str = "mean"):
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = ops_functional.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(ops_functional.clamp(margin + d_pos - d_neg, min=0.0), reduction, "triplet_margin_loss")


def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False, size_average=None,  # noqa: A002
                     eps: float = 1e-8, reduce=None, reduction: str = "mean"):
    loss = ops_functional.exp(input) - target * input if log_input else input - target * ops_functional.log(input + eps)
    if full:  # Stirling's term where target > 1
        safe = ops_functional.where(target > 1, target, target * 0 + 1)
        stirling = safe * ops_functional.log(safe) - safe + 0.5 * ops_functional.log(2 * math.pi * safe)
        loss = loss + ops_functional.where(target > 1, stirling, stirling * 0)
    return _reduce(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6,  # noqa: A002
                      reduction: str = "mean"):
    """``0.5 (log var + (input - target)^2 / var)``; ``var`` clamped at ``eps`` (the clamp passes
    the gradient through, as PyTorch's in-place clamp under no_grad does)."""
    if var.ndim == input.ndim - 1 and tuple(var.shape) == tuple(input.shape[:-1]):
        var = ops_functional.unsqueeze(var, -1)
    var = var + (ops_functional.clamp(var, min=eps) - var).detach()
    loss = 0.5 * (ops_functional.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, "gaussian_nll_loss")


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,  # noqa: A002
                                reduction: str = "mean"):
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce(ops_functional.sum(loss, -1) / input.shape[-1], reduction, "multilabel_soft_margin_loss")
