"""Losses beyond the primitive ones: margin ranking, hinge and cosine embedding, soft margin,
triplet margin, Poisson and Gaussian negative log-likelihood, multilabel soft margin (PyTorch's
formulas, defaults and reductions); composites of the registry's primitives (so they
differentiate, trace into ``nn.Graph`` and export without rules of their own).
"""

from __future__ import annotations

import math

from flowserve.nn.distance_functions import pairwise_distance
from flowserve.ops import functional as ops_functional
from flowserve.ops.activation import logsigmoid
from flowserve.ops.loss import reduce as _reduce

__all__ = [
    "margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss", "cosine_embedding_loss",
    "triplet_margin_loss", "poisson_nll_loss", "gaussian_nll_loss", "multilabel_soft_margin_loss",
]


def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                        reduction: str = "mean"):
    return _reduce(
        ops_functional.clamp(-target * (input1 - input2) + margin, min=0.0), reduction, "margin_ranking_loss"
    )


def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,  # noqa: A002
                         reduction: str = "mean"):
    zero = input * 0
    loss = ops_functional.where(target == 1, input, zero) + ops_functional.where(
        target == -1, ops_functional.clamp(margin - input, min=0.0), zero
    )
    return _reduce(loss, reduction, "hinge_embedding_loss")


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):  # noqa: A002
    return _reduce(ops_functional.log(1 + ops_functional.exp(-target * input)), reduction, "soft_margin_loss")


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None, reduce=None,
                          reduction: str = "mean"):
    """``1 - cos`` for pairs labelled 1, ``max(0, cos - margin)`` for pairs labelled -1."""
    eps = 1e-12  # PyTorch's EPSILON
    dot = ops_functional.sum(input1 * input2, -1)
    cos = dot / ops_functional.sqrt(
        (ops_functional.sum(input1 * input1, -1) + eps) * (ops_functional.sum(input2 * input2, -1) + eps)
    )
    zero = cos * 0
    loss = ops_functional.where(target == 1, 1 - cos, zero) + ops_functional.where(
        target == -1, ops_functional.clamp(cos - margin, min=0.0), zero
    )
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
