"""Tensor creation, all of it: ``tensor``, ``zeros``, ``ones``, ``full``, ``arange``,
``randn``, ``*_like``, ... as ``flow.*`` spells them (``flowserve.api`` re-exports them).

- Eagerly they make tensors from numpy (random ones draw from ``flowserve.ops.generator``).
- Inside ``nn.Graph.build`` the random ones record random ops (``flowserve.ops.random``), so
  a compiled graph draws fresh values on every call instead of freezing the trace's draw; a
  size holding the batch (``flow.zeros(x.shape[0], 4)``, ``flow.arange(x.shape[0])``)
  becomes ops that follow the batch at run time (``flowserve.ops.dims``); other results
  become constants of the graph.
- Given OneFlow's ``placement=`` and ``sbp=`` they make a global tensor: the logical tensor
  (rank 0's draw for the random ones), of which each rank keeps its piece.

>>> import flowserve as flow
>>> flow.zeros(2, 3).shape
flowserve.Size([2, 3])
"""

from __future__ import annotations

import functools

import numpy as np

from flowserve import dtypes
from flowserve.autograd import no_grad
from flowserve.device import CPU, as_device
from flowserve.ops import core_functions, random
from flowserve.ops.dims import BatchDim, as_dim
from flowserve.ops.indexing_functions import cumsum
from flowserve.ops.generator import Generator, default_generator, manual_seed, rng_of
from flowserve.ops.registry import broadcast_shapes, current_trace
from flowserve.tensor import Tensor, array_from, from_array

__all__ = [
    "Generator", "default_generator", "manual_seed", "tensor", "from_numpy", "zeros", "ones", "empty", "full",
    "arange", "linspace", "eye", "randn", "rand", "randint", "randperm", "normal", "zeros_like", "ones_like",
    "empty_like", "full_like", "randn_like", "rand_like", "randint_like",
]


def with_placement(random: bool = False):
    """A creation function that also takes OneFlow's ``placement=``/``sbp=``: with them it
    makes the logical tensor and keeps this rank's piece (``Tensor._global_from_logical``,
    from ``flowserve.distributed``); ``random``: the ranks' draws differ, rank 0's is used."""

    def decorate(create):
        @functools.wraps(create)
        def make(*args, placement=None, sbp=None, **kwargs):
            if placement is None and sbp is None:
                return create(*args, **kwargs)
            requires_grad = kwargs.pop("requires_grad", False)
            with no_grad():
                out = create(*args, **kwargs)._global_from_logical(placement, sbp, same_on_every_rank=not random)
            return out.requires_grad_() if requires_grad else out

        return make

    return decorate


# -- sizes, dtypes, devices --------------------------------------------------------------------


def _size(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return tuple(as_dim(s) for s in size)  # the batch mark of a trace survives (ops.dims)


def _size_arg(args: tuple, size) -> tuple:
    """The size given positionally (``zeros(2, 3)``, ``zeros((2, 3))``) or as ``size=`` (PyTorch's keyword)."""
    if size is None:
        return _size(args)
    if args:
        raise TypeError(f"got the size both positionally {args} and as size={size}")
    return _size((size,))


def _float_dtype(dtype):
    return dtypes.as_dtype(dtype) if dtype is not None else dtypes.default_float


def _device(device):
    return as_device(device) if device is not None else CPU


def _batch_sized(size: tuple) -> bool:
    """Inside a trace, a size that holds the symbolic batch (``zeros(x.shape[0], 4)``)."""
    return current_trace() is not None and any(isinstance(d, BatchDim) for d in size)


def _traced_full(size: tuple, value, dtype, device):
    """``full`` inside a trace with a batch-sized shape: an ``expand`` that follows the batch."""
    scalar = core_functions.scalar_tensor(value, dtypes.as_dtype(dtype), _device(device))
    return core_functions.expand(scalar, list(size))


def _made(t: Tensor, requires_grad: bool) -> Tensor:
    """``t`` as a creation function made it: with ``requires_grad``, a leaf that requires
    grad. Inside ``nn.Graph.build`` that leaf is the traced value of ``t`` (a constant, a
    draw, a copy of a parameter), so that, as eagerly where each call makes a new leaf,
    ``backward()`` gives it this call's gradient (``.grad``, ``flow.autograd.grad``) rather
    than leaving a constant of the graph without one."""
    if not requires_grad:
        return t
    trace = current_trace()
    if trace is not None:
        t = trace.lift(t).detach()
    return t.requires_grad_()


# -- from data -------------------------------------------------------------------------------


@with_placement()
def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of ``data``: ``flow.tensor([[1., 2.]])``. Inside
    ``nn.Graph.build`` a copy of a tensor is its traced value (a parameter's copy reads the
    parameter on every call, not its value when the graph was traced)."""
    if current_trace() is not None:
        if isinstance(data, Tensor):
            copied = data.detach()  # traced values are never written in place: no copy op needed
            return _made(copied if dtype is None else copied.to(dtype), requires_grad)
        if _holds_tensor(data):
            return _made(_traced_nested(data, dtype), requires_grad)
    arr = np.array(array_from(data, dtypes.default_float), copy=True)
    return _made(from_array(arr, dtype, device), requires_grad)


def _holds_tensor(data) -> bool:
    return isinstance(data, Tensor) or (isinstance(data, (list, tuple)) and any(_holds_tensor(x) for x in data))


def _traced_nested(data, dtype):
    """``flow.tensor`` of (nested) lists holding tensors inside a trace: the stack of their
    traced values, so that parameters and buffers in it are read on every call. Its dtype and
    shape are those eager mode gives (``array_from`` on zeros of the same layout)."""
    like = array_from(_zeros_of(data), dtypes.default_float)
    target = dtypes.as_dtype(dtype) if dtype is not None else dtypes.from_numpy(like.dtype)
    return core_functions.reshape(_stacked(data, target), tuple(like.shape))


def _zeros_of(data):
    if isinstance(data, Tensor):
        return np.zeros(tuple(int(d) for d in data.shape), data.dtype.np)
    return [_zeros_of(x) for x in data] if isinstance(data, (list, tuple)) else data


def _stacked(data, target):
    if isinstance(data, Tensor):
        return tensor(data).to(target)
    if isinstance(data, (list, tuple)):
        return core_functions.stack([_stacked(x, target) for x in data])  # not empty: it holds a tensor
    return from_array(np.asarray(data, target.np))


def from_numpy(array: np.ndarray):
    """A tensor sharing memory with ``array``."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expected a numpy.ndarray, got {type(array).__name__}")
    return from_array(array)


# -- filled ----------------------------------------------------------------------------------


@with_placement()
def zeros(*size_args, size=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size)
    if _batch_sized(size):
        return _made(_traced_full(size, 0, _float_dtype(dtype), device), requires_grad)
    return _made(from_array(np.zeros(size, _float_dtype(dtype).np), None, device), requires_grad)


@with_placement()
def ones(*size_args, size=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size)
    if _batch_sized(size):
        return _made(_traced_full(size, 1, _float_dtype(dtype), device), requires_grad)
    return _made(from_array(np.ones(size, _float_dtype(dtype).np), None, device), requires_grad)


@with_placement()
def empty(*size_args, size=None, dtype=None, device=None, requires_grad=False):
    return zeros(*_size_arg(size_args, size), dtype=dtype, device=device, requires_grad=requires_grad)


@with_placement()
def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    shape = _size((size,))
    if dtype is None:
        dtype = dtypes.default_float if isinstance(fill_value, float) else dtypes.as_dtype(type(fill_value))
    if _batch_sized(shape):
        return _made(_traced_full(shape, fill_value, dtype, device), requires_grad)
    return _made(from_array(np.full(shape, fill_value, dtypes.as_dtype(dtype).np), None, device), requires_grad)


# -- ranges ----------------------------------------------------------------------------------


@with_placement()
def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None and isinstance(start, BatchDim) and current_trace() is not None and step == 1:
        ones_ = _traced_full((start,), 1, dtypes.int64, device)  # a running count that follows the batch
        count = cumsum(ones_, 0) - 1
        return _made(core_functions.cast(count, dtypes.as_dtype(dtype) if dtype else dtypes.int64), requires_grad)
    if end is None:
        start, end = 0, start
    is_float = any(isinstance(v, float) for v in (start, end, step))
    default = dtypes.default_float if is_float else dtypes.int64
    data = np.arange(start, end, step, dtype=np.float64 if is_float else np.int64)
    data = data.astype((dtypes.as_dtype(dtype) if dtype else default).np)
    return _made(from_array(data, None, device), requires_grad)


@with_placement()
def linspace(start, end, steps: int, dtype=None, device=None, requires_grad=False):
    data = np.linspace(start, end, int(steps), dtype=np.float64)
    return _made(from_array(data.astype(_float_dtype(dtype).np), None, device), requires_grad)


@with_placement()
def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad=False):
    return _made(from_array(np.eye(n, m, dtype=_float_dtype(dtype).np), None, device), requires_grad)


# -- random ----------------------------------------------------------------------------------


@with_placement(random=True)
def randn(*size_args, size=None, dtype=None, device=None, requires_grad=False, generator=None):
    size = _size_arg(size_args, size)
    if current_trace() is not None:  # a graph draws fresh values per call
        return _made(random.traced_normal(size, _float_dtype(dtype), _device(device), generator=generator),
                     requires_grad)
    data = rng_of(generator).standard_normal(size, dtype=np.float64)
    return _made(from_array(data.astype(_float_dtype(dtype).np), None, device), requires_grad)


@with_placement(random=True)
def rand(*size_args, size=None, dtype=None, device=None, requires_grad=False, generator=None):
    size = _size_arg(size_args, size)
    if current_trace() is not None:
        return _made(random.traced_uniform(size, _float_dtype(dtype), _device(device), generator=generator),
                     requires_grad)
    data = rng_of(generator).random(size, dtype=np.float64)
    return _made(from_array(data.astype(_float_dtype(dtype).np), None, device), requires_grad)


@with_placement(random=True)
def randint(low, high=None, size=(), dtype=None, device=None, generator=None):
    """Integers in ``[low, high)``: ``flow.randint(0, 10, (2, 3))`` or ``flow.randint(10, (2, 3))``."""
    if isinstance(high, (tuple, list)):
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if current_trace() is not None:
        uniform = random.traced_uniform(_size((size,)), dtypes.float32, _device(device), low, high, generator)
        return random.integers_from(uniform, low, high, dtype)
    data = rng_of(generator).integers(low, high, size=_size((size,)), dtype=np.int64)
    return from_array(data, dtype, device)


@with_placement(random=True)
def randperm(n: int, dtype=None, device=None, generator=None):
    if current_trace() is not None:
        return random.traced_randperm(int(n), dtype, _device(device), generator)
    return from_array(rng_of(generator).permutation(n).astype(np.int64), dtype, device)


@with_placement(random=True)
def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None):
    """Normal draws (``torch.normal``): ``normal(mean_tensor, std_tensor)`` elementwise, or
    ``normal(mean, std, size)`` with numbers; fresh per call inside a graph.

    >>> import flowserve as flow
    >>> tuple(flow.normal(0.0, 2.0, (3, 4)).shape)
    (3, 4)
    """
    if size is not None:
        return randn(*size, generator=generator, dtype=dtype, device=device) * std + mean
    mean_t = mean if hasattr(mean, "shape") else None
    std_t = std if hasattr(std, "shape") else None
    like = mean_t if mean_t is not None else std_t
    if like is None:
        raise TypeError("normal expects tensors for mean or std, or a size=")
    shape = broadcast_shapes("normal", *[tuple(t.shape) for t in (mean_t, std_t) if t is not None])
    z = randn(*shape, generator=generator, dtype=like.dtype, device=like.device)
    return z * std + mean


# -- like another tensor ----------------------------------------------------------------------


def _like(create, t, dtype=None, device=None, requires_grad=False, random=False, **kw):
    """``create`` with ``t``'s size, dtype and device; a global ``t`` gives a global result with
    its placement and sbp (OneFlow's rule; random: rank 0's draw)."""
    if t.is_global:
        return t._global_like(lambda: create(*t.shape, dtype=dtype or t.dtype, device=device or t.device, **kw),
                              requires_grad, random=random)
    return create(*t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad, **kw)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return _like(zeros, t, dtype, device, requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return _like(ones, t, dtype, device, requires_grad)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return _like(zeros, t, dtype, device, requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    def create(*size, dtype, device, requires_grad=False):
        return full(size, fill_value, dtype=dtype, device=device, requires_grad=requires_grad)

    return _like(create, t, dtype, device, requires_grad)


def randn_like(t, dtype=None, device=None, requires_grad=False, generator=None):
    if current_trace() is not None:
        return _made(random.normal_as(t, dtype=dtype, generator=generator), requires_grad)
    return _like(randn, t, dtype, device, requires_grad, random=True, generator=generator)


def rand_like(t, dtype=None, device=None, requires_grad=False, generator=None):
    if current_trace() is not None:
        return _made(random.uniform_as(t, dtype=dtype, generator=generator), requires_grad)
    return _like(rand, t, dtype, device, requires_grad, random=True, generator=generator)


def randint_like(t, low, high=None, dtype=None, device=None, generator=None):
    if current_trace() is not None:
        low, high = (0, low) if high is None else (low, high)
        return random.integers_from(random.uniform_as(t, low, high, dtypes.float32, generator), low, high,
                                    dtype or t.dtype)
    return randint(low, high, tuple(t.shape), dtype=dtype or t.dtype, device=device or t.device, generator=generator)
