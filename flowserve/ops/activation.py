"""Activation functions and dropout, as composites of primitives (no gradient or lowering of
their own). Branches that could overflow are clamped before ``exp`` so that the unused
branch of a ``where`` never turns a gradient into NaN."""

from __future__ import annotations

import math

from flowserve.ops import dropout as dropout_ops
from flowserve.ops import functional
from flowserve.ops import math as math_ops
def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0):
    return functional.clamp(x, min_val, max_val)


def relu6(x):
    return functional.clamp(x, 0.0, 6.0)


def leaky_relu(x, negative_slope: float = 0.01):
    return functional.where(functional.gt(x, 0), x, x * negative_slope)


def elu(x, alpha: float = 1.0):
    return functional.where(functional.gt(x, 0), x, (functional.exp(functional.minimum(x, 0.0)) - 1.0) * alpha)


def gelu(x, approximate: str = "none"):
    """Gaussian error linear unit: exact (``erf``) or ``approximate="tanh"``."""
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (functional.tanh(inner) + 1.0)
    if approximate != "none":
        raise ValueError(f"gelu expected approximate 'none' or 'tanh', got {approximate!r}")
    # x / sqrt(2), not x * (1 / sqrt(2)): ONNX Runtime fuses this form (with a preceding bias
    # add) into one BiasGelu/Gelu kernel in graph mode (docs/graph.md, Performance)
    return x * 0.5 * (math_ops.erf(x / math.sqrt(2.0)) + 1.0)


def silu(x):
    return x * functional.sigmoid(x)


def hardsigmoid(x):
    return functional.clamp(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)


def hardswish(x):
    return x * hardsigmoid(x)


def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    scaled = x * beta
    soft = functional.log(functional.exp(functional.minimum(scaled, threshold)) + 1.0) * (1.0 / beta)
    return functional.where(functional.gt(scaled, threshold), x, soft)


def mish(x):
    return x * functional.tanh(softplus(x))


def logsigmoid(x):
    return -softplus(-x)


def dropout(x, p: float = 0.5, training: bool = True):
    """Zero elements with probability ``p`` and scale the rest by ``1 / (1 - p)`` (training only).

    Masks come from ``flow.manual_seed``'s generator eagerly, and from ONNX Runtime's
    generator inside a compiled ``nn.Graph`` (see ``flowserve.ops.dropout``).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    return x * dropout_ops.dropout_mask(x, p=float(p)) * (1.0 / (1.0 - p))
