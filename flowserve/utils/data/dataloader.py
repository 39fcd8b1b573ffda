"""``DataLoader``: batches of a dataset, in sampler order, collated into tensors."""

from __future__ import annotations

from flowserve.utils.data.collate import default_collate, default_convert
from flowserve.utils.data.dataset import IterableDataset
from flowserve.utils.data.sampler import BatchSampler, RandomSampler, SequentialSampler


class DataLoader:
    """Iterate over ``dataset`` in batches, as PyTorch's ``DataLoader``.

    >>> import flowserve as flow
    >>> ds = flow.utils.data.TensorDataset(flow.randn(10, 3), flow.arange(10))
    >>> loader = flow.utils.data.DataLoader(ds, batch_size=4, shuffle=True, drop_last=True,
    ...                                     generator=flow.Generator().manual_seed(0))
    >>> [tuple(x.shape) for x, y in loader], len(loader)
    ([(4, 3), (4, 3)], 2)

    ``shuffle`` draws a new order each epoch from ``generator`` (or flowserve's default
    generator, seeded by ``flow.manual_seed``). Loading happens in the calling process:
    ``num_workers`` > 0 is accepted and loads in-process too (no worker processes, so
    ``worker_init_fn`` is not called); ``pin_memory`` and the worker options are accepted
    for PyTorch compatibility and change nothing.
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor: int | None = None,
                 persistent_workers: bool = False, pin_memory_device: str = ""):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DataLoader expected num_workers to be a non-negative integer, got {num_workers!r}")
        self.dataset = dataset
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.generator = generator
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            _check_iterable_options(shuffle, sampler, batch_sampler)
        user_batch_sampler = batch_sampler is not None
        self.sampler, self.batch_sampler = _make_samplers(
            dataset, batch_size, shuffle, sampler, batch_sampler, drop_last, generator, self._iterable)
        self.batch_size = None if user_batch_sampler else batch_size  # as PyTorch
        self.drop_last = drop_last
        auto_batch = self.batch_sampler is not None or (self._iterable and batch_size is not None)
        self.collate_fn = collate_fn or (default_collate if auto_batch else default_convert)
        self._auto_batch = auto_batch

    def __iter__(self):
        if self._iterable:
            return self._iter_stream()
        if self._auto_batch:
            return (self.collate_fn(self._fetch(indices)) for indices in self.batch_sampler)
        return (self.collate_fn(self.dataset[i]) for i in self.sampler)

    def _fetch(self, indices: list) -> list:
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            return getitems(indices)
        return [self.dataset[i] for i in indices]

    def _iter_stream(self):
        if not self._auto_batch:
            yield from (self.collate_fn(sample) for sample in self.dataset)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)  # TypeError when the stream has no length, as in PyTorch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler) if self._auto_batch else len(self.sampler)


def _check_iterable_options(shuffle, sampler, batch_sampler) -> None:
    for name, value in (("shuffle", shuffle if shuffle else None), ("sampler", sampler),
                        ("batch_sampler", batch_sampler)):
        if value is not None:
            raise ValueError(f"DataLoader with IterableDataset: expected unspecified {name} option, "
                             f"but got {name}={value!r}")


def _make_samplers(dataset, batch_size, shuffle, sampler, batch_sampler, drop_last, generator, iterable):
    if iterable:
        return None, None
    if sampler is not None and shuffle:
        raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError("DataLoader: batch_sampler option is mutually exclusive with batch_size, "
                             "shuffle, sampler, and drop_last")
        return sampler, batch_sampler
    if batch_size is None and drop_last:
        raise ValueError("DataLoader: batch_size=None option disables auto-batching and is mutually "
                         "exclusive with drop_last")
    if sampler is None:
        sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
    if batch_size is not None:
        batch_sampler = BatchSampler(sampler, batch_size, drop_last)
    return sampler, batch_sampler
