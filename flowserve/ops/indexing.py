"""Indexing ops that go beyond slices: reductions with indices, tensor indices."""

from __future__ import annotations

from collections import namedtuple

from flowserve.ops import functional as F

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def max_with_indices(x, dim: int, keepdim: bool = False) -> ValuesIndices:
    return ValuesIndices(F.amax(x, dim, keepdim), F.argmax(x, dim, keepdim))


def min_with_indices(x, dim: int, keepdim: bool = False) -> ValuesIndices:
    return ValuesIndices(F.amin(x, dim, keepdim), F.argmin(x, dim, keepdim))


def advanced_getitem(x, key):
    raise IndexError(
        f"indexing with tensors, lists or arrays needs the gather ops; got key {key!r} "
        f"for a tensor of size {tuple(x.shape)}")
