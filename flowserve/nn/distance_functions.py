"""Distances of ``flowserve.nn.functional``: ``normalize``, ``cosine_similarity``,
``pairwise_distance``; composites of the registry's primitives (so they differentiate, trace
into ``nn.Graph`` and export without rules of their own).
"""

from __future__ import annotations

import math

from flowserve.ops import functional as ops_functional

__all__ = ["normalize", "cosine_similarity", "pairwise_distance"]


def _norm(x, p: float, dim, keepdim: bool):
    if p == 2:
        return ops_functional.sqrt(ops_functional.sum(x * x, dim=dim, keepdim=keepdim))
    if p == 1:
        return ops_functional.sum(ops_functional.abs(x), dim=dim, keepdim=keepdim)
    if math.isinf(p):
        return ops_functional.amax(ops_functional.abs(x), dim=dim, keepdim=keepdim)
    return ops_functional.pow(
        ops_functional.sum(ops_functional.pow(ops_functional.abs(x), p), dim=dim, keepdim=keepdim), 1.0 / p
    )


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):  # noqa: A002
    """``input / max(||input||_p, eps)`` along ``dim`` (``torch.nn.functional.normalize``)."""
    return input / ops_functional.clamp(_norm(input, p, dim, True), min=eps)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """PyTorch's formula: ``sum(x1 * x2) / sqrt(clamp(|x1|^2 * |x2|^2, eps^2))``."""
    dot = ops_functional.sum(x1 * x2, dim=dim)
    squares = ops_functional.sum(x1 * x1, dim=dim) * ops_functional.sum(x2 * x2, dim=dim)
    return dot / ops_functional.sqrt(ops_functional.clamp(squares, min=eps * eps))


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    return _norm(x1 - x2 + eps, p, -1, keepdim)
