"""``flowserve.nn.functional``: the functional forms of the nn modules, with PyTorch's
signatures.

>>> import flowserve as flow
>>> import flowserve.nn.functional as F
>>> x = flow.randn(2, 3, 8, 8)
>>> F.conv2d(x, flow.randn(4, 3, 3, 3), padding="same").shape
flowserve.Size([2, 4, 8, 8])
>>> F.max_pool2d(x, 2).shape
flowserve.Size([2, 3, 4, 4])
"""

from __future__ import annotations

import numpy as _np

from flowserve.ops import conv as _conv
from flowserve.ops.autocast_policy import lower_precision as _lower_precision
from flowserve.ops import creation as _creation
from flowserve.ops import functional as _ops_functional
from flowserve.ops import indexing
from flowserve.ops import pool as _pool
from flowserve.ops.activation import dropout as _dropout  # noqa: F401
from flowserve.ops.activation import (
    elu,
    gelu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    logsigmoid,
    mish,
    relu6,
    silu,
    softplus,
)
from flowserve.ops.attention import scaled_dot_product_attention  # noqa: F401
from flowserve.ops.attention import multi_head_attention
from flowserve.ops.functional import one_hot, relu, sigmoid, tanh  # noqa: F401
from flowserve.ops.loss import (  # noqa: F401
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from flowserve.ops.norm import batch_norm as _batch_norm
from flowserve.ops.norm import group_norm, layer_norm  # noqa: F401
from flowserve.ops.padding import pad  # noqa: F401
from flowserve.ops.registry import fail_shape
from flowserve.tensor import Tensor as _Tensor


@_lower_precision
def linear(x, weight, bias=None):
    """``x @ weight.T + bias``, as ``torch.nn.functional.linear``."""
    if x.ndim == 0 or x.shape[-1] != weight.shape[-1]:
        fail_shape("linear", f"input (..., {weight.shape[-1]})", f"{tuple(x.shape)}")
    out = _ops_functional.matmul(x, _ops_functional.t(weight))
    return out + bias if bias is not None else out


def flatten(x, start_dim: int = 1, end_dim: int = -1):
    return _ops_functional.flatten(x, start_dim, end_dim)


def softmax(x, dim: int | None = None, dtype=None):
    x = _ops_functional.cast(x, dtype) if dtype is not None else x
    return _ops_functional.softmax(x, -1 if dim is None else dim)


def log_softmax(x, dim: int | None = None, dtype=None):
    x = _ops_functional.cast(x, dtype) if dtype is not None else x
    return _ops_functional.log_softmax(x, -1 if dim is None else dim)


def dropout(x, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero elements with probability ``p`` while training (see ``flowserve.ops.dropout`` for
    where the masks come from in eager and graph mode)."""
    out = _dropout(x, p, training)
    return x._assign(out) if inplace and out is not x else out


# -- convolution and pooling ----------------------------------------------------------------


@_lower_precision
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):  # noqa: A002
    return _conv.conv_nd(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


@_lower_precision
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):  # noqa: A002
    return _conv.conv_nd(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


@_lower_precision
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,  # noqa: A002
                     groups: int = 1, dilation=1):
    return _conv.conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups, dilation,
                                   1, "conv_transpose1d")


@_lower_precision
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,  # noqa: A002
                     groups: int = 1, dilation=1):
    return _conv.conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups, dilation,
                                   2, "conv_transpose2d")


def _pool_args(kernel_size, stride, padding, dilation, where: str):
    kernel = _conv.tuple_arg(kernel_size, 2, "kernel_size", where)
    stride = kernel if stride is None or stride == [] else _conv.tuple_arg(stride, 2, "stride", where)
    return kernel, stride, _conv.tuple_arg(padding, 2, "padding", where), _conv.tuple_arg(dilation, 2, "dilation", where)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,  # noqa: A002
               return_indices: bool = False, where: str = "max_pool2d"):
    """Max over (kh, kw) windows; with ``return_indices``, PyTorch's per-plane flat indices."""
    if input.ndim != 4:
        fail_shape(where, "input (N, C, H, W)", tuple(input.shape))
    kernel, stride, pads, dilation = _pool_args(kernel_size, stride, padding, dilation, where)
    attrs = dict(kernel=kernel, stride=stride, pads=pads, dilation=dilation, ceil_mode=bool(ceil_mode))
    values = _pool.max_pool2d(input, **attrs)
    if not return_indices:
        return values
    indices = _pool.max_pool2d_indices(input, **attrs)
    n, c, h, w = input.shape
    offsets = _np.arange(n * c, dtype=_np.int64).reshape(n, c, 1, 1) * (h * w)
    return values, indices - _creation.tensor(offsets, device=input.device)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,  # noqa: A002
               return_indices: bool = False):
    if input.ndim != 3:
        fail_shape("max_pool1d", "input (N, C, L)", tuple(input.shape))
    one = lambda v: (1, v if isinstance(v, int) else v[0])  # noqa: E731
    out = max_pool2d(_ops_functional.unsqueeze(input, 2), one(kernel_size), None if stride is None else one(stride),
                     (0, padding if isinstance(padding, int) else padding[0]), one(dilation), ceil_mode,
                     return_indices, "max_pool1d")
    if return_indices:
        return _ops_functional.squeeze(out[0], 2), _ops_functional.squeeze(out[1], 2)
    return _ops_functional.squeeze(out, 2)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,  # noqa: A002
                            return_indices: bool = True):
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,  # noqa: A002
                            return_indices: bool = True):
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True, divisor_override=None):
    kernel, stride, pads, _ = _pool_args(kernel_size, stride, padding, 1, "avg_pool2d")
    return _pool.avg_pool2d(input, kernel, stride, pads, ceil_mode, count_include_pad, divisor_override)


def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    return _pool.adaptive_avg_pool2d(input, output_size)


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):  # noqa: A002
    return _pool.interpolate(input, size, scale_factor, mode, align_corners)


upsample = interpolate


# -- normalisation, embedding ----------------------------------------------------------------


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,  # noqa: A002
               momentum: float = 0.1, eps: float = 1e-5):
    return _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def embedding(input, weight, padding_idx=None):  # noqa: A002
    """Rows of ``weight`` picked by integer ``input``; rows at ``padding_idx`` get no gradient."""
    if weight.ndim != 2:
        fail_shape("embedding", "a weight (num_embeddings, embedding_dim)", tuple(weight.shape))
    out = indexing.take(weight, input, axis=0)
    if padding_idx is None:
        return out
    if padding_idx < 0:
        padding_idx += weight.shape[0]
    is_pad = _ops_functional.unsqueeze(_ops_functional.eq(input, padding_idx), -1)
    return _ops_functional.where(is_pad, out.detach(), out)


def depend(input, depend):  # noqa: A002 - OneFlow's argument names
    """OneFlow's control dependency: returns ``input`` and asks that the ops producing
    ``depend`` (a tensor or a list of tensors) run before the ops that use the result.

    Eager mode runs ops in program order, so ``input`` comes back unchanged. ``nn.Graph``
    computes the same values: its ops run in data-flow order on ONNX Runtime, and whatever a
    dependency changes besides its value (an in-place update of a buffer or a parameter) is a
    state update of the graph, which is always kept; a dependency with no such effect changes
    no result and is pruned, as OneFlow prunes it."""
    deps = depend if isinstance(depend, (list, tuple)) else [depend]
    for d in [input, *deps]:
        if not isinstance(d, _Tensor):
            raise TypeError(f"depend expects tensors (input: Tensor, depend: Tensor or list of Tensors), "
                            f"got {type(d).__name__}")
    return input


# -- attention ------------------------------------------------------------------------------


def multi_head_attention_forward(query, key, value, num_heads: int, in_proj_weight, in_proj_bias,
                                 out_proj_weight, out_proj_bias, key_padding_mask=None,
                                 need_weights: bool = True, attn_mask=None, dropout_p: float = 0.0,
                                 average_attn_weights: bool = True, batch_first: bool = False):
    """Multi-head attention with packed (3E, E) input projections, as PyTorch's function of this
    name (``batch_first`` says whether inputs are (N, L, E) or (L, N, E))."""
    e = query.shape[-1]
    ws = [_ops_functional.getitem(in_proj_weight, slice(i * e, (i + 1) * e)) for i in range(3)]
    bs = [None] * 3 if in_proj_bias is None else [_ops_functional.getitem(in_proj_bias, slice(i * e, (i + 1) * e))
                                                  for i in range(3)]
    if not batch_first:
        query, key, value = (_ops_functional.transpose(t, 0, 1) for t in (query, key, value))
    out, weights = multi_head_attention(query, key, value, num_heads, (ws[0], bs[0]), (ws[1], bs[1]),
                                        (ws[2], bs[2]), (out_proj_weight, out_proj_bias), attn_mask,
                                        key_padding_mask, need_weights, average_attn_weights, dropout_p)
    return (out if batch_first else _ops_functional.transpose(out, 0, 1)), weights


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("annotations", "fail_shape")]


from flowserve.nn.activation_functions import *  # noqa: E402,F401,F403 - inplace= forms, selu, glu, shrinks, ...
from flowserve.nn.distance_functions import *  # noqa: E402,F401,F403 - normalize, cosine_similarity, pairwise_distance
from flowserve.nn.dropout_functions import *  # noqa: E402,F401,F403 - dropout1d/2d/3d
from flowserve.nn.linear_functions import *  # noqa: E402,F401,F403 - bilinear
from flowserve.nn.loss_functions import *  # noqa: E402,F401,F403 - margin, embedding, likelihood losses
from flowserve.nn.normalization_functions import *  # noqa: E402,F401,F403 - instance_norm, rms_norm
from flowserve.nn.patch_functions import *  # noqa: E402,F401,F403 - unfold/fold, pixel and channel shuffles
from flowserve.nn.pooling_functions import *  # noqa: E402,F401,F403 - adaptive max, 1-d and power pooling
from flowserve.nn.sampling_functions import *  # noqa: E402,F401,F403 - affine_grid, grid_sample, upsample_*
from flowserve.nn.sequence_functions import *  # noqa: E402,F401,F403 - embedding_bag, ctc_loss
from flowserve.nn.volumetric_functions import *  # noqa: E402,F401,F403 - conv3d, max_pool3d, avg_pool3d, ...

from flowserve._missing import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("flowserve.nn.functional")  # PyTorch/OneFlow names flowserve lacks: say what to use instead
