"""``pad`` as a composite (no gradient or lowering of its own).

Constant padding places the input with ``slice_backward`` (lowered to ONNX ``Pad``) and fills
the border through a mask of the padded trailing dims; reflect, replicate and circular
padding pick rows with ``take`` along each padded dim. Neither bakes the leading (batch) dims
into a traced graph.
"""

from __future__ import annotations

import numpy as np

from flowserve.ops import functional
from flowserve.ops import indexing as indexing_ops
from flowserve.ops import shape as shape_ops
from flowserve.ops.registry import fail_shape
from flowserve.tensor import from_array

MODES = ("constant", "reflect", "replicate", "circular")


def _source_index(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """For each position of the padded dim, the input position it copies."""
    pos = np.arange(-before, size + after)
    if mode == "replicate":
        return np.clip(pos, 0, size - 1)
    if mode == "circular":
        return pos % size
    period = 2 * (size - 1)  # reflect without repeating the edge
    folded = np.abs(pos) % period if period else np.zeros_like(pos)
    return np.where(folded >= size, period - folded, folded)


def _check(x, pad, mode: str) -> list:
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        fail_shape("pad", f"an even number of pad sizes, at most {2 * x.ndim}", list(pad))
    if mode not in MODES:
        raise ValueError(f"pad expected mode one of {MODES}, got {mode!r}")
    pairs = [(int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(len(pad) // 2)]  # last dim first
    for i, (b, a) in enumerate(pairs):
        size = x.shape[x.ndim - 1 - i]
        if mode == "reflect" and max(b, a) >= size:
            fail_shape("pad", f"reflect padding smaller than the dim ({size})", f"({b}, {a}) for dim {x.ndim - 1 - i}")
        if mode == "circular" and max(b, a) > size:
            fail_shape("pad", f"circular padding at most the dim ({size})", f"({b}, {a}) for dim {x.ndim - 1 - i}")
        if mode != "constant" and min(b, a) < 0:
            fail_shape("pad", f"non-negative {mode} padding", f"({b}, {a})")
    return pairs


def _constant(x, pairs, value: float):
    crop = [(i, max(-b, 0), max(-a, 0)) for i, (b, a) in enumerate(pairs) if b < 0 or a < 0]
    for i, b, a in crop:  # negative constant padding crops
        axis = x.ndim - 1 - i
        x = shape_ops.slice_(x, starts=[b], ends=[x.shape[axis] - a], axes=[axis], steps=[1])
    pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
    axes = [x.ndim - 1 - i for i in range(len(pairs))]
    shape = list(x.shape)
    for axis, (b, a) in zip(axes, pairs):
        shape[axis] += b + a
    starts = [b for b, _ in pairs]
    ends = [b + x.shape[axis] for axis, (b, _) in zip(axes, pairs)]
    placed = shape_ops.slice_backward(x, shape=shape, starts=starts, ends=ends, axes=axes, steps=[1] * len(axes))
    if value == 0:
        return placed
    inside = np.zeros(shape[min(axes):], dtype=bool)
    inside[tuple(slice(s, e) for s, e in zip(starts[::-1], ends[::-1]))] = True
    return functional.where(from_array(inside, device=x.device), placed, value)


def pad(x, pad, mode: str = "constant", value=None):
    """Pad the trailing dims (``pad`` lists (before, after) pairs, last dim first), as
    ``torch.nn.functional.pad``.

    >>> import flowserve as flow
    >>> flow.nn.functional.pad(flow.ones(1, 2, 3), (1, 2), mode="replicate").shape
    flowserve.Size([1, 2, 6])
    """
    pairs = _check(x, pad, mode)
    if mode == "constant":
        return _constant(x, pairs, 0.0 if value is None else float(value))
    for i, (b, a) in enumerate(pairs):
        if b or a:
            axis = x.ndim - 1 - i
            index = _source_index(x.shape[axis], b, a, mode)
            x = indexing_ops.take(x, from_array(index, device=x.device), axis=axis)
    return x
