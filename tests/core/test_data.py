"""``flowserve.utils.data`` against ``torch.utils.data``: for the same index order, the
same batches (values, dtypes and structure); samplers, splits and option checks."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import flowserve as flow
from flowserve.utils import data as fdata

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests (pip install torch==2.13.0)")
tdata = torch.utils.data

Pair = namedtuple("Pair", "left right")


class Records:
    """A map-style dataset of nested samples; ``lib`` makes its tensors."""

    def __init__(self, lib, n: int = 7):
        self.lib, self.n = lib, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.lib.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) + i)
        return {"x": x, "label": i % 3, "weight": i / 3, "flag": i % 2 == 0,
                "array": np.full(2, i, dtype=np.int32), "scalar": np.float32(i) / 4,
                "name": f"item{i}", "pair": Pair(i, [i, -i]), "tuple": (x.sum(), i)}


def plain(obj):
    """A batch as nested numpy/python values with dtype names, for comparing the two."""
    if isinstance(obj, (flow.Tensor, torch.Tensor)):
        array = obj.numpy() if isinstance(obj, flow.Tensor) else obj.detach().numpy()
        return ("tensor", str(array.dtype), array.tolist())
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [plain(v) for v in obj])
    return obj


def batches(loader):
    return [plain(b) for b in loader]


ORDER = [5, 2, 6, 0, 3, 1, 4]


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (3, False), (3, True), (7, False), (10, True)])
def test_batches_match_torch_for_the_same_order(batch_size, drop_last):
    ours = fdata.DataLoader(Records(flow), batch_size=batch_size, sampler=ORDER, drop_last=drop_last)
    theirs = tdata.DataLoader(Records(torch), batch_size=batch_size, sampler=ORDER, drop_last=drop_last)
    assert batches(ours) == batches(theirs)
    assert len(ours) == len(theirs)


def test_tensor_dataset_and_custom_collate_match_torch():
    x, y = np.random.default_rng(0).standard_normal((9, 4)).astype(np.float32), np.arange(9)
    ours = fdata.DataLoader(fdata.TensorDataset(flow.tensor(x), flow.tensor(y)), batch_size=4)
    theirs = tdata.DataLoader(tdata.TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=4)
    assert batches(ours) == batches(theirs) and len(ours) == len(theirs) == 3

    def collate(samples):
        return len(samples), [s[1] for s in samples]

    ours = fdata.DataLoader(fdata.TensorDataset(flow.tensor(x), flow.tensor(y)), batch_size=4, collate_fn=collate)
    assert [(n, [int(v) for v in ys]) for n, ys in ours] == [(4, [0, 1, 2, 3]), (4, [4, 5, 6, 7]), (1, [8])]


def test_batch_sampler_and_no_batching_match_torch():
    batch_sampler = [[3, 1], [0], [6, 5, 4]]
    ours = fdata.DataLoader(Records(flow), batch_sampler=batch_sampler)
    theirs = tdata.DataLoader(Records(torch), batch_sampler=batch_sampler)
    assert batches(ours) == batches(theirs) and len(ours) == 3 and ours.batch_size is None
    ours = fdata.DataLoader(Records(flow), batch_size=None, sampler=ORDER)
    theirs = tdata.DataLoader(Records(torch), batch_size=None, sampler=ORDER)
    assert batches(ours) == batches(theirs) and len(ours) == 7


class Stream(fdata.IterableDataset):
    def __init__(self, lib):
        self.lib = lib

    def __iter__(self):
        return (self.lib.tensor([float(i), -float(i)]) for i in range(5))


class TorchStream(tdata.IterableDataset):
    def __iter__(self):
        return iter(Stream(torch))


def test_iterable_dataset_batches_match_torch():
    for kwargs in (dict(batch_size=2), dict(batch_size=2, drop_last=True), dict(batch_size=None)):
        assert batches(fdata.DataLoader(Stream(flow), **kwargs)) == batches(tdata.DataLoader(TorchStream(), **kwargs))
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        fdata.DataLoader(Stream(flow), shuffle=True)


def test_shuffle_is_reproducible_with_a_generator_and_new_each_epoch():
    ds = fdata.TensorDataset(flow.arange(10))
    make = lambda: fdata.DataLoader(ds, batch_size=3, shuffle=True,  # noqa: E731
                                    generator=flow.Generator().manual_seed(7))
    first, second = make(), make()
    epoch1 = [b[0].tolist() for b in first]
    assert epoch1 == [b[0].tolist() for b in second]
    assert sorted(sum(epoch1, [])) == list(range(10)) and [len(b) for b in epoch1] == [3, 3, 3, 1]
    epoch2 = [b[0].tolist() for b in first]
    assert epoch2 != epoch1 and sorted(sum(epoch2, [])) == list(range(10))
    flow.manual_seed(3)
    a = [b[0].tolist() for b in fdata.DataLoader(ds, batch_size=10, shuffle=True)]
    flow.manual_seed(3)
    assert a == [b[0].tolist() for b in fdata.DataLoader(ds, batch_size=10, shuffle=True)]


def test_samplers():
    gen = flow.Generator().manual_seed(0)
    draws = list(fdata.RandomSampler(range(4), replacement=True, num_samples=50, generator=gen))
    assert len(draws) == 50 and set(draws) <= set(range(4))
    longer = list(fdata.RandomSampler(range(4), num_samples=10, generator=gen))
    assert len(longer) == 10 and sorted(longer[:8]) == [0, 0, 1, 1, 2, 2, 3, 3]
    subset = list(fdata.SubsetRandomSampler([10, 20, 30], generator=gen))
    assert sorted(subset) == [10, 20, 30]
    assert list(fdata.SequentialSampler(range(3))) == [0, 1, 2]
    for n, size, drop in [(10, 3, False), (10, 3, True), (9, 3, True), (2, 5, False)]:
        ours, theirs = fdata.BatchSampler(range(n), size, drop), tdata.BatchSampler(range(n), size, drop)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    with pytest.raises(ValueError, match="batch_size to be a positive integer"):
        fdata.BatchSampler(range(3), 0, False)


@pytest.mark.filterwarnings("ignore:Length of split")  # torch warns of the empty split
@pytest.mark.parametrize("lengths", [[3, 7], [0.3, 0.7], [0.33, 0.33, 0.34], [0.5, 0.5, 0.0], [10]])
def test_random_split_sizes_match_torch_and_cover_the_dataset(lengths):
    ours = fdata.random_split(range(10), lengths, generator=flow.Generator().manual_seed(1))
    theirs = tdata.random_split(range(10), lengths, generator=torch.Generator().manual_seed(1))
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    items = sorted(x for s in ours for x in s)
    assert items == list(range(10))
    again = fdata.random_split(range(10), lengths, generator=flow.Generator().manual_seed(1))
    assert [s.indices for s in again] == [s.indices for s in ours]


def test_random_split_refuses_wrong_lengths():
    with pytest.raises(ValueError, match="summing to the dataset's length 10"):
        fdata.random_split(range(10), [3, 3])


def test_subset_and_concat_match_torch():
    a, b = list(range(5)), list(range(100, 103))
    ours, theirs = fdata.ConcatDataset([a, b]), tdata.ConcatDataset([a, b])
    assert len(ours) == len(theirs) == 8
    assert [ours[i] for i in range(-8, 8)] == [theirs[i] for i in range(-8, 8)]
    assert ours.cumulative_sizes == theirs.cumulative_sizes
    with pytest.raises(IndexError):
        ours[8]
    sub = fdata.Subset(fdata.TensorDataset(flow.arange(5) * 2), [4, 0])
    assert [sub[i][0].item() for i in range(len(sub))] == [8, 0]
    both = fdata.TensorDataset(flow.arange(2)) + fdata.TensorDataset(flow.arange(3))
    assert len(both) == 5 and both[4][0].item() == 2


def test_tensor_dataset_names_the_mismatched_sizes():
    with pytest.raises(flow.errors.ShapeError, match=r"same size in dim 0, got sizes \[\(3, 2\), \(4,\)\]"):
        fdata.TensorDataset(flow.zeros(3, 2), flow.zeros(4))


@pytest.mark.parametrize("kwargs", [dict(sampler=[0, 1], shuffle=True), dict(batch_sampler=[[0]], batch_size=2),
                                    dict(batch_sampler=[[0]], drop_last=True), dict(batch_size=None, drop_last=True)])
def test_conflicting_options_are_refused_as_torch(kwargs):
    with pytest.raises(ValueError) as theirs:
        tdata.DataLoader(list(range(4)), **kwargs)
    with pytest.raises(ValueError) as ours:
        fdata.DataLoader(list(range(4)), **kwargs)
    assert str(theirs.value).split(" option")[0] in str(ours.value)


def test_collate_errors_name_the_problem():
    with pytest.raises(RuntimeError, match="equal size"):
        fdata.default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="found object"):
        fdata.default_collate([object(), object()])


def test_num_workers_loads_in_process():
    ds = fdata.TensorDataset(flow.arange(6))
    loader = fdata.DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True, persistent_workers=True)
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5]]
