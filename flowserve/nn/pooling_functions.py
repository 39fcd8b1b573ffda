"""Pooling beyond the 2-d primitives: adaptive max pooling (1-d, 2-d), 1-d average pooling, power-
average pooling (``lp_pool1d``/``lp_pool2d``); composites of the registry's primitives (so they
differentiate, trace into ``nn.Graph`` and export without rules of their own).
"""

from __future__ import annotations

import math

from flowserve.nn.patch_functions import as_pair
from flowserve.nn.volumetric_functions import adaptive_max_pool3d
from flowserve.ops import functional as ops_functional
from flowserve.ops import pool
from flowserve.ops.registry import fail_shape

__all__ = [
    "adaptive_max_pool2d", "adaptive_max_pool1d", "avg_pool1d", "adaptive_avg_pool1d", "lp_pool2d",
    "lp_pool1d",
]


def _adaptive_bounds(size: int, out: int) -> list:
    return [(math.floor(i * size / out), math.ceil((i + 1) * size / out)) for i in range(out)]


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):  # noqa: A002
    """Max over PyTorch's adaptive windows (``floor(i*H/h)`` to ``ceil((i+1)*H/h)``); with
    ``return_indices``, also each maximum's position in its (H, W) plane (as PyTorch)."""
    if return_indices:  # the 3-d form over a depth of 1: its (1, H, W) positions are the plane's
        if input.ndim not in (3, 4):
            fail_shape("adaptive_max_pool2d", "input (N, C, H, W) or (C, H, W)", tuple(input.shape))
        size = as_pair(output_size)
        values, at = adaptive_max_pool3d(
            ops_functional.unsqueeze(input, -3), (1, size[0], size[1]), return_indices=True
        )
        return ops_functional.squeeze(values, -3), ops_functional.squeeze(at, -3)
    out = as_pair(output_size)
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
