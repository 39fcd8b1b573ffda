"""Datasets: ``Dataset``, ``IterableDataset``, ``TensorDataset``, ``Subset``,
``ConcatDataset`` and ``random_split``, with PyTorch's semantics."""

from __future__ import annotations

import bisect
import math

from flowserve.errors import ShapeError
from flowserve.ops.creation import randperm
from flowserve.tensor import Tensor


class Dataset:
    """A map-style dataset: define ``__getitem__(index)`` and ``__len__()``.

    >>> import flowserve as flow
    >>> class Squares(flow.utils.data.Dataset):
    ...     def __len__(self):
    ...         return 4
    ...     def __getitem__(self, i):
    ...         return i * i
    >>> [Squares()[i] for i in range(4)]
    [0, 1, 4, 9]
    """

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset read as a stream: define ``__iter__()``; DataLoader batches what it yields."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other):
        raise TypeError("IterableDataset does not support +; chain the iterables instead")


class TensorDataset(Dataset):
    """Samples are the ``index``-th rows of tensors of the same first dimension.

    >>> import flowserve as flow
    >>> ds = flow.utils.data.TensorDataset(flow.arange(6).reshape(3, 2), flow.tensor([0, 1, 0]))
    >>> len(ds), ds[1][1].item()
    (3, 1)
    """

    def __init__(self, *tensors: Tensor):
        if not tensors:
            raise ValueError("TensorDataset expected at least one tensor, got none")
        sizes = [t.shape[0] if t.ndim else None for t in tensors]
        if any(s is None or s != sizes[0] for s in sizes):
            raise ShapeError(f"TensorDataset expected tensors of the same size in dim 0, got sizes "
                             f"{[tuple(t.shape) for t in tensors]}")
        self.tensors = tuple(tensors)

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = list(indices)

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """The datasets one after the other (``ds_a + ds_b``)."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset expected a non-empty list of datasets")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int):
        if index < 0:
            if -index > len(self):
                raise IndexError(f"index {index} is out of range for ConcatDataset of length {len(self)}")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        if which == len(self.datasets):
            raise IndexError(f"index {index} is out of range for ConcatDataset of length {len(self)}")
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


def _split_lengths(lengths, total: int) -> list[int]:
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [int(math.floor(total * frac)) for frac in lengths]
        for frac in lengths:
            if not 0 <= frac <= 1:
                raise ValueError(f"random_split expected fractions between 0 and 1, got {frac}")
        for i in range(total - sum(counts)):  # the remainder, round-robin as PyTorch
            counts[i % len(counts)] += 1
        return counts
    if sum(lengths) != total:
        raise ValueError(f"random_split expected lengths summing to the dataset's length {total}, "
                         f"got {lengths} (sum {sum(lengths)})")
    return [int(n) for n in lengths]


def random_split(dataset, lengths, generator=None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random subsets of the given lengths or fractions.

    >>> import flowserve as flow
    >>> train, val = flow.utils.data.random_split(range(10), [0.8, 0.2],
    ...                                           generator=flow.Generator().manual_seed(0))
    >>> len(train), len(val)
    (8, 2)
    """
    counts = _split_lengths(lengths, len(dataset))
    order = randperm(sum(counts), generator=generator).tolist()
    subsets, offset = [], 0
    for n in counts:
        subsets.append(Subset(dataset, order[offset:offset + n]))
        offset += n
    return subsets
