"""``DistributedSampler``: each rank reads its own part of the dataset (PyTorch's rules)."""

from __future__ import annotations

import math

import numpy as np

from flowserve import env
from flowserve.utils.data.sampler import Sampler


class DistributedSampler(Sampler):
    """Indices ``rank, rank + num_replicas, ...`` of the (shuffled) dataset, padded by
    repeating its start so that every rank gets ``len(self)`` indices, or cut to a multiple
    of ``num_replicas`` with ``drop_last``. Call ``set_epoch(epoch)`` before each epoch:
    the shuffle is seeded by ``seed + epoch``, the same on every rank.

    >>> s = DistributedSampler(range(10), num_replicas=3, rank=1, shuffle=False)
    >>> list(s), len(s)
    ([1, 4, 7, 0], 4)
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        num_replicas = env.get_world_size() if num_replicas is None else num_replicas
        rank = env.get_rank() if rank is None else rank
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"DistributedSampler expected num_replicas >= 1, got {num_replicas!r}")
        if not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            padding = self.total_size - len(indices)
            while padding > 0:
                indices += indices[:padding]
                padding = self.total_size - len(indices)
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose shuffle ``__iter__`` yields (the same order on every rank)."""
        self.epoch = epoch
