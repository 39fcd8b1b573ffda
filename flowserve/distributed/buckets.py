"""Gradient buckets: parameters grouped (in reverse registration order, roughly the order
backward finishes them) into flat buffers of at most ``cap_bytes``, so that a few large
allreduces replace many small ones."""

from __future__ import annotations

import numpy as np

DEFAULT_BUCKET_CAP_MB = 25


def bucket_indices(sizes_bytes: list[int], cap_bytes: int) -> list[list[int]]:
    """Group item indices, last item first, into buckets of at most ``cap_bytes`` (an item
    larger than the cap is a bucket of its own).

    >>> bucket_indices([4, 4, 4, 8], 8)
    [[3], [2, 1], [0]]
    """
    buckets, current, size = [], [], 0
    for i in reversed(range(len(sizes_bytes))):
        if current and size + sizes_bytes[i] > cap_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += sizes_bytes[i]
    if current:
        buckets.append(current)
    return buckets


def flatten(arrays: list[np.ndarray], dtype) -> np.ndarray:
    """One contiguous 1-d buffer holding ``arrays`` one after the other."""
    out = np.empty(sum(a.size for a in arrays), dtype)
    offset = 0
    for a in arrays:
        out[offset:offset + a.size] = a.reshape(-1)
        offset += a.size
    return out


def unflatten(flat: np.ndarray, shapes: list[tuple]) -> list[np.ndarray]:
    """Views of ``flat`` with ``shapes``, in order."""
    out, offset = [], 0
    for shape in shapes:
        n = int(np.prod(shape, dtype=np.int64))
        out.append(flat[offset:offset + n].reshape(shape))
        offset += n
    return out


class GradientReducer:
    """Averages the gradients of ``params`` over the ranks when a backward pass has set them
    (``finished()``): one allreduce per bucket, every bucket in flight before the first is
    waited for. A parameter with no gradient on this rank counts as zeros (every rank
    reduces the same buckets)."""

    def __init__(self, comm, params: list, cap_bytes: int, set_grad):
        self.comm, self.params, self.set_grad = comm, params, set_grad
        self.groups = bucket_indices([p.numel() * p.dtype.itemsize for p in params], cap_bytes)

    def _grad(self, i: int) -> np.ndarray:
        p = self.params[i]
        return p.grad.numpy() if p.grad is not None else np.zeros(tuple(p.shape), p.dtype.np)

    def finished(self) -> None:
        handles = []
        for group in self.groups:
            arrays = [self._grad(i) for i in group]
            handles.append(self.comm.allreduce_async(flatten(arrays, np.result_type(*arrays))))
        for group, handle in zip(self.groups, handles):
            flat = handle.wait()
            flat /= self.comm.world_size
            for i, mean in zip(group, unflatten(flat, [tuple(self.params[i].shape) for i in group])):
                self.set_grad(self.params[i], mean)
