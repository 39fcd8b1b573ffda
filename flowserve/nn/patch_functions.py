"""Rearranging pixels and patches: ``unfold``/``fold`` (im2col and its adjoint, as a grouped
convolution with one-hot kernels and the matching transposed convolution),
``pixel_shuffle``/``pixel_unshuffle`` and ``channel_shuffle``; composites of the registry's
primitives (so they differentiate, trace into ``nn.Graph`` and export without rules of their
own).
"""

from __future__ import annotations

import numpy as np

from flowserve.ops import conv as conv_ops
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops.registry import fail_shape

__all__ = ["unfold", "fold", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle"]


def as_pair(v) -> tuple:
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
    kernel, channels = as_pair(kernel_size), input.shape[1]
    weight = _one_hot_kernels(channels, kernel, input.dtype, input.device)
    cols = conv_ops.conv_nd(
        input, weight, None, as_pair(stride), as_pair(padding), as_pair(dilation), channels, 2, "unfold"
    )
    return ops_functional.reshape(cols, (input.shape[0], cols.shape[1], -1))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """Sum columns ``(N, C * kh * kw, L)`` back into ``(N, C, *output_size)`` (col2im)."""
    kernel, size = as_pair(kernel_size), as_pair(output_size)
    taps = kernel[0] * kernel[1]
    if input.ndim != 3 or input.shape[1] % taps:
        fail_shape("fold", f"(N, C * {taps}, L)", tuple(input.shape))
    stride, padding, dilation = as_pair(stride), as_pair(padding), as_pair(dilation)
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


def channel_shuffle(input, groups: int):  # noqa: A002
    """ShuffleNet's shuffle: ``(N, g*c, ...)`` viewed as ``(N, g, c, ...)``, transposed, flattened."""
    n, channels = input.shape[0], input.shape[1]
    rest = list(input.shape[2:])
    out = ops_functional.transpose(ops_functional.reshape(input, [n, groups, channels // groups] + rest), 1, 2)
    return ops_functional.reshape(out, [n, channels] + rest)
