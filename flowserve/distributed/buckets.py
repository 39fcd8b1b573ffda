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


def allreduce_mean(comm, arrays: list[np.ndarray], cap_bytes: int) -> list[np.ndarray]:
    """The mean over ranks of each array, reduced in buckets; every bucket is in flight
    before the first is waited for."""
    if comm.world_size == 1:
        return [np.array(a) for a in arrays]
    groups = bucket_indices([a.nbytes for a in arrays], cap_bytes)
    flats = [flatten([arrays[i] for i in group], np.result_type(*[arrays[i] for i in group]))
             for group in groups]
    handles = [comm.allreduce_async(flat) for flat in flats]
    out: list = [None] * len(arrays)
    for group, handle in zip(groups, handles):
        flat = handle.wait()
        flat /= comm.world_size
        for i, view in zip(group, unflatten(flat, [arrays[i].shape for i in group])):
            out[i] = view
    return out
