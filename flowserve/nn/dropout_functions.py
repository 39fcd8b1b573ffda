"""Channel dropout: ``dropout1d``/``dropout2d``/``dropout3d`` drop whole channels (one draw per
sample and channel); composites of the registry's primitives (so they differentiate, trace into
``nn.Graph`` and export without rules of their own).
"""

from __future__ import annotations

import warnings

from flowserve.nn.activation_functions import maybe_inplace
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops.registry import fail_shape

__all__ = ["dropout1d", "dropout2d", "dropout3d"]


def _channel_dropout(input, p: float, training: bool, inplace: bool, spatial: int, name: str,  # noqa: A002
                     lead_dims=None):
    """Zero whole channels: one draw per index of the ``lead_dims`` leading dimensions (by
    default all but the ``spatial`` last), broadcast over the rest."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if lead_dims is None and input.ndim not in (spatial + 1, spatial + 2):
        fail_shape(name, f"a {spatial + 1}-d or {spatial + 2}-d input", tuple(input.shape))
    if not training or p == 0.0:
        return input
    lead_dims = input.ndim - spatial if lead_dims is None else lead_dims
    lead = tuple(input.shape[:lead_dims])
    keep = ops_functional.ge(
        creation.rand(*lead, *([1] * (input.ndim - lead_dims)), dtype=input.dtype, device=input.device), p
    )
    out = input * ops_functional.cast(keep, input.dtype) * (1.0 / (1.0 - p)) if p < 1 else input * 0.0
    return maybe_inplace(input, out, inplace)


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False):  # noqa: A002
    return _channel_dropout(input, p, training, inplace, 1, "dropout1d")


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False):  # noqa: A002
    """PyTorch's ``dropout2d``: one draw per (sample, channel) of ``(N, C, H, W)``. As PyTorch
    does, other ranks are accepted with a warning and keep its historical meaning: a 3-D input
    is ``(N, C, L)`` (channel-wise 1-D dropout), a 2-D input ``(N, C)`` drops single elements."""
    if input.ndim < 2:
        fail_shape("dropout2d", "an input of at least 2 dimensions (N, C, ...)", tuple(input.shape))
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated "
                      "and will result in an error in a future release. To retain the behavior and "
                      "silence this warning, please use dropout instead.", stacklevel=2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
                      "dropout behavior is desired - input is interpreted as shape (N, C, L), where C is "
                      "the channel dim. To maintain the 1D channel-wise dropout behavior, please switch "
                      "to using dropout1d instead.", stacklevel=2)
    return _channel_dropout(input, p, training, inplace, 2, "dropout2d", lead_dims=2)


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False):  # noqa: A002
    return _channel_dropout(input, p, training, inplace, 3, "dropout3d")
