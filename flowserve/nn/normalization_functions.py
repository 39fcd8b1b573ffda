"""Normalisations beyond batch, layer and group norm: ``instance_norm`` and ``rms_norm``;
composites of the registry's primitives (so they differentiate, trace into ``nn.Graph`` and
export without rules of their own).
"""

from __future__ import annotations

import ml_dtypes

from flowserve.ops import functional as ops_functional
from flowserve.ops.norm import group_norm
from flowserve.ops.registry import fail_shape

__all__ = ["instance_norm", "rms_norm"]


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,  # noqa: A002
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    """Normalise each (sample, channel) plane: a group norm with one group per channel."""
    if not use_input_stats:
        shape = (1, -1) + (1,) * (input.ndim - 2)
        out = (input - ops_functional.reshape(running_mean, shape)) / ops_functional.sqrt(
            ops_functional.reshape(running_var, shape) + eps
        )
    else:
        out = group_norm(input, input.shape[1], None, None, eps)
    if weight is not None:
        shape = (1, -1) + (1,) * (input.ndim - 2)
        out = out * ops_functional.reshape(weight, shape) + ops_functional.reshape(bias, shape)
    return out


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
