"""``bilinear``: ``x1^T A x2 + b`` for every output feature (an ``einsum``); composites of the
registry's primitives (so they differentiate, trace into ``nn.Graph`` and export without rules
of their own).
"""

from __future__ import annotations

from flowserve.ops import math_functions

__all__ = ["bilinear"]


def bilinear(input1, input2, weight, bias=None):
    """``y[..., o] = x1 @ weight[o] @ x2 + bias[o]`` (``torch.nn.functional.bilinear``)."""
    out = math_functions.einsum("...i,oij,...j->...o", input1, weight, input2)
    return out + bias if bias is not None else out
