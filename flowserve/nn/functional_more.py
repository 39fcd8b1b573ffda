"""More of ``torch.nn.functional``, all composites of the registry's primitives (so they
differentiate, trace into ``nn.Graph`` and export without rules of their own):

- the activations with PyTorch's ``inplace=`` argument (``relu(x, inplace=True)``) and their
  ``relu_``-style twins, plus ``selu``, ``celu``, ``glu``, ``threshold``, ``softsign``;
- ``normalize``, ``cosine_similarity``, ``pairwise_distance``;
- ``unfold``/``fold`` (im2col and its adjoint, as a grouped convolution with one-hot kernels
  and the matching transposed convolution), ``pixel_shuffle``/``pixel_unshuffle``;
- ``dropout1d``/``dropout2d``/``dropout3d`` (whole channels), ``instance_norm``,
  ``adaptive_max_pool1d``/``adaptive_max_pool2d``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from flowserve.ops import activation as activation_ops
from flowserve.ops import conv as conv_ops
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.nn.functional_3d import adaptive_max_pool3d
from flowserve.ops.norm import group_norm
from flowserve.ops.registry import fail_shape


__all__ = ["relu", "relu6", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "silu",
           "mish", "threshold", "relu_", "elu_", "leaky_relu_", "hardtanh_", "softsign", "glu", "normalize",
           "cosine_similarity", "pairwise_distance", "unfold", "fold", "pixel_shuffle", "pixel_unshuffle",
           "dropout1d", "dropout2d", "dropout3d", "instance_norm", "adaptive_max_pool1d", "adaptive_max_pool2d",
           "grid_sample", "affine_grid"]


def _maybe_inplace(x, out, inplace: bool):
    return x._assign(out) if inplace else out


def relu(input, inplace: bool = False):  # noqa: A002 - PyTorch's argument names
    return _maybe_inplace(input, ops_functional.relu(input), inplace)


def relu6(input, inplace: bool = False):  # noqa: A002
    return _maybe_inplace(input, activation_ops.relu6(input), inplace)


def elu(input, alpha: float = 1.0, inplace: bool = False):  # noqa: A002
    return _maybe_inplace(input, activation_ops.elu(input, alpha), inplace)


def selu(input, inplace: bool = False):  # noqa: A002
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return _maybe_inplace(input, activation_ops.elu(input, alpha) * scale, inplace)


def celu(input, alpha: float = 1.0, inplace: bool = False):  # noqa: A002
    out = ops_functional.where(ops_functional.gt(input, 0), input, (ops_functional.exp(ops_functional.minimum(input, 0.0) / alpha) - 1.0) * alpha)
    return _maybe_inplace(input, out, inplace)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):  # noqa: A002
    return _maybe_inplace(input, activation_ops.leaky_relu(input, negative_slope), inplace)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):  # noqa: A002
    return _maybe_inplace(input, activation_ops.hardtanh(input, min_val, max_val), inplace)


def hardswish(input, inplace: bool = False):  # noqa: A002
    return _maybe_inplace(input, activation_ops.hardswish(input), inplace)


def hardsigmoid(input, inplace: bool = False):  # noqa: A002
    return _maybe_inplace(input, activation_ops.hardsigmoid(input), inplace)


def silu(input, inplace: bool = False):  # noqa: A002
    return _maybe_inplace(input, activation_ops.silu(input), inplace)


def mish(input, inplace: bool = False):  # noqa: A002
    return _maybe_inplace(input, activation_ops.mish(input), inplace)


def threshold(input, threshold: float, value: float, inplace: bool = False):  # noqa: A002
    return _maybe_inplace(input, ops_functional.where(ops_functional.gt(input, threshold), input, value), inplace)


def relu_(input):  # noqa: A002
    return relu(input, inplace=True)


def elu_(input, alpha: float = 1.0):  # noqa: A002
    return elu(input, alpha, inplace=True)


def leaky_relu_(input, negative_slope: float = 0.01):  # noqa: A002
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val: float = -1.0, max_val: float = 1.0):  # noqa: A002
    return hardtanh(input, min_val, max_val, inplace=True)


def softsign(input):  # noqa: A002
    return input / (ops_functional.abs(input) + 1)


def glu(input, dim: int = -1):  # noqa: A002
    if input.shape[dim] % 2:
        fail_shape("glu", f"an even size in dim {dim}", tuple(input.shape))
    dim = dim % input.ndim
    half = input.shape[dim] // 2
    return ops_functional.slice_axis(input, dim, 0, half) * ops_functional.sigmoid(ops_functional.slice_axis(input, dim, half, 2 * half))


# -- distances -------------------------------------------------------------------------------------


def _norm(x, p: float, dim, keepdim: bool):
    if p == 2:
        return ops_functional.sqrt(ops_functional.sum(x * x, dim=dim, keepdim=keepdim))
    if p == 1:
        return ops_functional.sum(ops_functional.abs(x), dim=dim, keepdim=keepdim)
    if math.isinf(p):
        return ops_functional.amax(ops_functional.abs(x), dim=dim, keepdim=keepdim)
    return ops_functional.pow(ops_functional.sum(ops_functional.pow(ops_functional.abs(x), p), dim=dim, keepdim=keepdim), 1.0 / p)


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


# -- im2col ----------------------------------------------------------------------------------------


def _pair(v) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v), int(v))


def _one_hot_kernels(channels: int, kernel: tuple, dtype, device):
    """``(channels * kh * kw, 1, kh, kw)``: one kernel per (channel, tap), grouped by channel."""
    taps = kernel[0] * kernel[1]
    eye = np.eye(taps, dtype=dtype.np).reshape(taps, 1, kernel[0], kernel[1])
    return creation.tensor(np.tile(eye, (channels, 1, 1, 1)), dtype=dtype, device=device)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """Sliding blocks of ``(N, C, H, W)`` as columns ``(N, C * kh * kw, L)`` (im2col)."""
    if input.ndim != 4:
        fail_shape("unfold", "a 4-d input (N, C, H, W)", tuple(input.shape))
    kernel, channels = _pair(kernel_size), input.shape[1]
    weight = _one_hot_kernels(channels, kernel, input.dtype, input.device)
    cols = conv_ops.conv_nd(input, weight, None, _pair(stride), _pair(padding), _pair(dilation), channels, 2, "unfold")
    return ops_functional.reshape(cols, (input.shape[0], cols.shape[1], -1))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """Sum columns ``(N, C * kh * kw, L)`` back into ``(N, C, *output_size)`` (col2im)."""
    kernel, size = _pair(kernel_size), _pair(output_size)
    taps = kernel[0] * kernel[1]
    if input.ndim != 3 or input.shape[1] % taps:
        fail_shape("fold", f"(N, C * {taps}, L)", tuple(input.shape))
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    blocks = [(size[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2)]
    if blocks[0] * blocks[1] != input.shape[2]:
        fail_shape("fold", f"L = {blocks[0] * blocks[1]} blocks for output_size {size}", tuple(input.shape))
    channels = input.shape[1] // taps
    grid = ops_functional.reshape(input, (input.shape[0], input.shape[1], blocks[0], blocks[1]))
    weight = _one_hot_kernels(channels, kernel, input.dtype, input.device)
    extra = [size[i] + 2 * padding[i] - ((blocks[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1)
             for i in range(2)]
    return conv_ops.conv_transpose_nd(grid, weight, None, stride, padding, tuple(extra), channels, dilation, 2, "fold")


def pixel_shuffle(input, upscale_factor: int):  # noqa: A002
    n, c, h, w = input.shape
    r = upscale_factor
    if c % (r * r):
        fail_shape("pixel_shuffle", f"channels divisible by {r * r}", tuple(input.shape))
    x = ops_functional.reshape(input, (n, c // (r * r), r, r, h, w))
    return ops_functional.reshape(ops_functional.permute(x, (0, 1, 4, 2, 5, 3)), (n, c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor: int):  # noqa: A002
    n, c, h, w = input.shape
    r = downscale_factor
    if h % r or w % r:
        fail_shape("pixel_unshuffle", f"height and width divisible by {r}", tuple(input.shape))
    x = ops_functional.reshape(input, (n, c, h // r, r, w // r, r))
    return ops_functional.reshape(ops_functional.permute(x, (0, 1, 3, 5, 2, 4)), (n, c * r * r, h // r, w // r))


# -- channel dropout, instance norm, adaptive max pooling -------------------------------------------


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
    keep = ops_functional.ge(creation.rand(*lead, *([1] * (input.ndim - lead_dims)), dtype=input.dtype, device=input.device), p)
    out = input * ops_functional.cast(keep, input.dtype) * (1.0 / (1.0 - p)) if p < 1 else input * 0.0
    return _maybe_inplace(input, out, inplace)


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


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,  # noqa: A002
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    """Normalise each (sample, channel) plane: a group norm with one group per channel."""
    if not use_input_stats:
        shape = (1, -1) + (1,) * (input.ndim - 2)
        out = (input - ops_functional.reshape(running_mean, shape)) / ops_functional.sqrt(ops_functional.reshape(running_var, shape) + eps)
    else:
        out = group_norm(input, input.shape[1], None, None, eps)
    if weight is not None:
        shape = (1, -1) + (1,) * (input.ndim - 2)
        out = out * ops_functional.reshape(weight, shape) + ops_functional.reshape(bias, shape)
    return out


def _adaptive_bounds(size: int, out: int) -> list:
    return [(math.floor(i * size / out), math.ceil((i + 1) * size / out)) for i in range(out)]


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):  # noqa: A002
    """Max over PyTorch's adaptive windows (``floor(i*H/h)`` to ``ceil((i+1)*H/h)``); with
    ``return_indices``, also each maximum's position in its (H, W) plane (as PyTorch)."""
    if return_indices:  # the 3-d form over a depth of 1: its (1, H, W) positions are the plane's
        if input.ndim not in (3, 4):
            fail_shape("adaptive_max_pool2d", "input (N, C, H, W) or (C, H, W)", tuple(input.shape))
        size = _pair(output_size)
        values, at = adaptive_max_pool3d(ops_functional.unsqueeze(input, -3), (1, size[0], size[1]), return_indices=True)
        return ops_functional.squeeze(values, -3), ops_functional.squeeze(at, -3)
    out = _pair(output_size)
    size = input.shape[-2:]
    out = tuple(s if o is None else o for o, s in zip(out, size))
    rows, h_axis, w_axis = [], input.ndim - 2, input.ndim - 1
    for top, bottom in _adaptive_bounds(size[0], out[0]):
        band = ops_functional.slice_axis(input, h_axis, top, bottom)
        cells = [ops_functional.amax(ops_functional.slice_axis(band, w_axis, left, right), dim=(h_axis, w_axis), keepdim=True)
                 for left, right in _adaptive_bounds(size[1], out[1])]
        rows.append(ops_functional.cat(cells, w_axis))
    return ops_functional.cat(rows, h_axis)


def adaptive_max_pool1d(input, output_size, return_indices: bool = False):  # noqa: A002
    out = adaptive_max_pool2d(ops_functional.unsqueeze(input, -2), (1, output_size), return_indices)
    return tuple(ops_functional.squeeze(t, -2) for t in out) if return_indices else ops_functional.squeeze(out, -2)


# -- sampling grids --------------------------------------------------------------------------------


def affine_grid(theta, size, align_corners: bool = False):
    """``(N, H, W, 2)`` sampling coordinates of the affine maps ``theta`` (N, 2, 3)."""
    n, _, h, w = size
    xs, ys = (np.linspace(-1, 1, k) * (1 if align_corners else (k - 1) / k) if k > 1 else np.zeros(1)
              for k in (w, h))
    base = np.stack(np.broadcast_arrays(xs[None, :], ys[:, None], np.ones((1, 1))), -1).reshape(1, h * w, 3)
    grid = ops_functional.matmul(creation.tensor(base, dtype=theta.dtype), ops_functional.transpose(theta, 1, 2))
    return ops_functional.reshape(grid, (n, h, w, 2))


def _unnormalize(coord, size: int, align_corners: bool):
    return (coord + 1) * ((size - 1) / 2) if align_corners else ((coord + 1) * size - 1) / 2


def _gather_plane(flat, ix, iy, w: int, valid):
    """Values of ``flat`` (N, C, H*W) at integer pixels (ix, iy) (N, P); 0 where not ``valid``."""
    index = ops_functional.cast(ops_functional.clamp(iy, min=0) * w + ops_functional.clamp(ix, min=0), "int64")
    index = ops_functional.expand(ops_functional.unsqueeze(index, 1), (flat.shape[0], flat.shape[1], index.shape[1]))
    return flat.gather(2, index) * ops_functional.unsqueeze(ops_functional.cast(valid, flat.dtype), 1)


def grid_sample(input, grid, mode: str = "bilinear", padding_mode: str = "zeros",  # noqa: A002
                align_corners: bool = False):
    """Sample ``input`` (N, C, H, W) at ``grid`` (N, Ho, Wo, 2) in [-1, 1] (x, y), as PyTorch:
    ``bilinear`` or ``nearest``, ``zeros`` or ``border`` padding."""
    if mode not in ("bilinear", "nearest") or padding_mode not in ("zeros", "border"):
        raise ValueError(f"grid_sample supports mode 'bilinear'/'nearest' and padding_mode 'zeros'/'border', "
                         f"got {mode!r} and {padding_mode!r}")
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2:
        fail_shape("grid_sample", "input (N, C, H, W) and grid (N, Ho, Wo, 2)", (tuple(input.shape), tuple(grid.shape)))
    n, c, h, w = input.shape
    ho, wo = grid.shape[1], grid.shape[2]
    points = ops_functional.reshape(grid, (n, ho * wo, 2))
    x = _unnormalize(ops_functional.squeeze(ops_functional.slice_axis(points, 2, 0, 1), 2), w, align_corners)
    y = _unnormalize(ops_functional.squeeze(ops_functional.slice_axis(points, 2, 1, 2), 2), h, align_corners)
    if padding_mode == "border":
        x, y = ops_functional.clamp(x, 0, w - 1), ops_functional.clamp(y, 0, h - 1)
    flat = ops_functional.reshape(input, (n, c, h * w))
    if mode == "nearest":
        ix, iy = ops_functional.round(x), ops_functional.round(y)  # half to even, as PyTorch's nearbyint
        corners = [(ix, iy, None)]
    else:
        x0, y0 = ops_functional.floor(x), ops_functional.floor(y)
        x1, y1 = x0 + 1, y0 + 1
        corners = [(x0, y0, (x1 - x) * (y1 - y)), (x1, y0, (x - x0) * (y1 - y)),
                   (x0, y1, (x1 - x) * (y - y0)), (x1, y1, (x - x0) * (y - y0))]
    out = None
    for ix, iy, weight in corners:
        valid = ops_functional.logical_and(ops_functional.logical_and(ops_functional.ge(ix, 0), ops_functional.le(ix, w - 1)), ops_functional.logical_and(ops_functional.ge(iy, 0), ops_functional.le(iy, h - 1)))
        value = _gather_plane(flat, ops_functional.clamp(ix, max=w - 1), ops_functional.clamp(iy, max=h - 1), w, valid)
        term = value if weight is None else value * ops_functional.unsqueeze(weight, 1)
        out = term if out is None else out + term
    return ops_functional.reshape(out, (n, c, ho, wo))
