"""Resampling: ``affine_grid``/``grid_sample`` and PyTorch's ``upsample_nearest``/
``upsample_bilinear``; composites of the registry's primitives (so they differentiate, trace
into ``nn.Graph`` and export without rules of their own).
"""

from __future__ import annotations

import numpy as np

from flowserve.ops import creation, pool
from flowserve.ops import functional as ops_functional
from flowserve.ops.registry import fail_shape

__all__ = ["affine_grid", "grid_sample", "upsample_nearest", "upsample_bilinear"]


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
        valid = ops_functional.logical_and(
            ops_functional.logical_and(ops_functional.ge(ix, 0), ops_functional.le(ix, w - 1)),
            ops_functional.logical_and(ops_functional.ge(iy, 0), ops_functional.le(iy, h - 1)),
        )
        value = _gather_plane(flat, ops_functional.clamp(ix, max=w - 1), ops_functional.clamp(iy, max=h - 1), w, valid)
        term = value if weight is None else value * ops_functional.unsqueeze(weight, 1)
        out = term if out is None else out + term
    return ops_functional.reshape(out, (n, c, ho, wo))


def upsample_nearest(input, size=None, scale_factor=None):  # noqa: A002
    return pool.interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):  # noqa: A002
    return pool.interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
