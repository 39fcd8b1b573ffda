"""Tensor creation: ``tensor``, ``zeros``, ``randn``, ... and the global random generator.

These make eager tensors from numpy; inside ``nn.Graph.build`` their results become
constants of the graph.
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.device import CPU, as_device, to_device_array
from flowserve.ops.dims import as_dim
from flowserve.tensor import Tensor, array_from


class Generator:
    """A seeded source of random numbers (``flowserve.Generator().manual_seed(0)``)."""

    def __init__(self, seed: int | None = None):
        self.manual_seed(seed if seed is not None else np.random.SeedSequence().entropy % (2**63))

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self.rng = np.random.default_rng(self._seed)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def draw_seed(self) -> np.ndarray:
        """The next seed this generator gives a compiled ``nn.Graph`` (one per call), as
        an int64 0-d array below ``2**31 - 1``."""
        return np.asarray(self.rng.integers(0, (1 << 31) - 1), dtype=np.int64)


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Seed flowserve's default generator, as ``flow.manual_seed(0)``."""
    return default_generator.manual_seed(seed)


def _rng(generator: Generator | None):
    return (generator or default_generator).rng


def _make(data: np.ndarray, dtype=None, device=None, requires_grad=False):
    if dtype is not None:
        data = data.astype(dtypes.as_dtype(dtype).np, copy=False)
    d = as_device(device) if device is not None else CPU
    t = Tensor._wrap(to_device_array(data, d), d)
    if requires_grad:
        t.requires_grad = True
    return t


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of ``data``: ``flow.tensor([[1., 2.]])``."""
    arr = np.array(array_from(data, dtypes.default_float), copy=True)
    return _make(arr, dtype, device, requires_grad)


def from_numpy(array: np.ndarray):
    """A tensor sharing memory with ``array``."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expected a numpy.ndarray, got {type(array).__name__}")
    return _make(array)


def _size(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return tuple(as_dim(s) for s in size)  # the batch mark of a trace survives (ops.dims)


def _float_dtype(dtype):
    return dtypes.as_dtype(dtype) if dtype is not None else dtypes.default_float


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return _make(np.zeros(_size(size), _float_dtype(dtype).np), None, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return _make(np.ones(_size(size), _float_dtype(dtype).np), None, device, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    if dtype is None:
        dtype = dtypes.as_dtype(type(fill_value)) if not isinstance(fill_value, float) else dtypes.default_float
    return _make(np.full(_size((size,)), fill_value, dtypes.as_dtype(dtype).np), None, device, requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def randn(*size, dtype=None, device=None, requires_grad=False, generator=None):
    data = _rng(generator).standard_normal(_size(size), dtype=np.float64)
    return _make(data.astype(_float_dtype(dtype).np), None, device, requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False, generator=None):
    data = _rng(generator).random(_size(size), dtype=np.float64)
    return _make(data.astype(_float_dtype(dtype).np), None, device, requires_grad)


def randint(low, high=None, size=(), dtype=None, device=None, generator=None):
    """Integers in ``[low, high)``: ``flow.randint(0, 10, (2, 3))`` or ``flow.randint(10, (2, 3))``."""
    if isinstance(high, (tuple, list)):
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    data = _rng(generator).integers(low, high, size=_size((size,)), dtype=np.int64)
    return _make(data, dtype, device)


def randperm(n: int, dtype=None, device=None, generator=None):
    return _make(_rng(generator).permutation(n).astype(np.int64), dtype, device)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    is_float = any(isinstance(v, float) for v in (start, end, step))
    default = dtypes.default_float if is_float else dtypes.int64
    data = np.arange(start, end, step, dtype=np.float64 if is_float else np.int64)
    return _make(data.astype((dtypes.as_dtype(dtype) if dtype else default).np), None, device, requires_grad)


def linspace(start, end, steps: int, dtype=None, device=None, requires_grad=False):
    data = np.linspace(start, end, int(steps), dtype=np.float64)
    return _make(data.astype(_float_dtype(dtype).np), None, device, requires_grad)


def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad=False):
    return _make(np.eye(n, m, dtype=_float_dtype(dtype).np), None, device, requires_grad)


def _like(fn, t, dtype=None, device=None, requires_grad=False, **kw):
    if t.is_global:  # OneFlow's rule: global, with t's placement and sbp (random: rank 0's draw)
        return t._global_like(lambda: fn(*t.shape, dtype=dtype or t.dtype, device=device or t.device, **kw),
                              requires_grad, random=fn in (randn, rand))
    return fn(*t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad, **kw)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return _like(zeros, t, dtype, device, requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return _like(ones, t, dtype, device, requires_grad)


def randn_like(t, dtype=None, device=None, requires_grad=False, generator=None):
    return _like(randn, t, dtype, device, requires_grad, generator=generator)


def rand_like(t, dtype=None, device=None, requires_grad=False, generator=None):
    return _like(rand, t, dtype, device, requires_grad, generator=generator)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    if t.is_global:
        return t._global_like(lambda: full(tuple(t.shape), fill_value, dtype=dtype or t.dtype,
                                           device=device or t.device), requires_grad)
    return full(tuple(t.shape), fill_value, dtype=dtype or t.dtype, device=device or t.device,
                requires_grad=requires_grad)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return _like(empty, t, dtype, device, requires_grad)


def randint_like(t, low, high=None, dtype=None, device=None, generator=None):
    return randint(low, high, tuple(t.shape), dtype=dtype or t.dtype, device=device or t.device,
                   generator=generator)
