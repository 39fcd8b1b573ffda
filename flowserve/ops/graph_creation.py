"""The creation functions as the public API spells them (``flow.zeros``, ``flow.randn``,
``x.new_empty``...), aware of ``nn.Graph`` tracing:

- inside ``build``, the random ones record random ops (``flowserve.ops.random``), so a
  compiled graph draws fresh values on every call instead of freezing the trace's draw;
- a size holding the batch (``flow.zeros(x.shape[0], 4)``, ``flow.arange(x.shape[0])``)
  becomes ops that follow the batch at run time (``flowserve.ops.dims``) instead of a
  constant of the traced batch size.

Eagerly they are ``flowserve.ops.creation``'s functions.
"""

from __future__ import annotations

from flowserve import dtypes
from flowserve.device import CPU, as_device
from flowserve.ops import basic as F
from flowserve.ops import creation as C
from flowserve.ops import random as R
from flowserve.ops.dims import BatchDim
from flowserve.ops.functional_index import cumsum
from flowserve.ops.registry import broadcast_shapes, current_trace


def _device(device):
    return as_device(device) if device is not None else CPU


def _size_arg(args: tuple, size) -> tuple:
    """The size given positionally (``zeros(2, 3)``, ``zeros((2, 3))``) or as ``size=`` (PyTorch's keyword)."""
    if size is None:
        return args
    if args:
        raise TypeError(f"got the size both positionally {args} and as size={size}")
    return (size,)


def _batch_sized(size: tuple) -> bool:
    """Inside a trace, a size that holds the symbolic batch (``zeros(x.shape[0], 4)``)."""
    return current_trace() is not None and any(isinstance(d, BatchDim) for d in size)


def _traced_full(size: tuple, value, dtype, device):
    """``full`` inside a trace with a batch-sized shape: an ``expand`` that follows the batch."""
    return F.expand(F.scalar_tensor(value, dtypes.as_dtype(dtype), _device(device)), list(size))


def zeros(*size_args, size=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size)
    if _batch_sized(C._size(size)):
        return _traced_full(C._size(size), 0, C._float_dtype(dtype), device)
    return C.zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def ones(*size_args, size=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size)
    if _batch_sized(C._size(size)):
        return _traced_full(C._size(size), 1, C._float_dtype(dtype), device)
    return C.ones(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def empty(*size_args, size=None, dtype=None, device=None, requires_grad=False):
    size = _size_arg(size_args, size)
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    shape = C._size((size,))
    if _batch_sized(shape):
        if dtype is None:
            dtype = dtypes.default_float if isinstance(fill_value, float) else dtypes.as_dtype(type(fill_value))
        return _traced_full(shape, fill_value, dtype, device)
    return C.full(size, fill_value, dtype=dtype, device=device, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None and isinstance(start, BatchDim) and current_trace() is not None and step == 1:
        ones_ = _traced_full((start,), 1, dtypes.int64, device)  # a running count that follows the batch
        return F.cast(cumsum(ones_, 0) - 1, dtypes.as_dtype(dtype) if dtype else dtypes.int64)
    return C.arange(start, end, step, dtype=dtype, device=device, requires_grad=requires_grad)


def randn(*size_args, size=None, dtype=None, device=None, requires_grad=False, generator=None):
    size = _size_arg(size_args, size)
    if current_trace() is not None:  # a graph draws fresh values per call
        return R.traced_normal(C._size(size), C._float_dtype(dtype), _device(device), generator=generator)
    return C.randn(*size, dtype=dtype, device=device, requires_grad=requires_grad, generator=generator)


def rand(*size_args, size=None, dtype=None, device=None, requires_grad=False, generator=None):
    size = _size_arg(size_args, size)
    if current_trace() is not None:
        return R.traced_uniform(C._size(size), C._float_dtype(dtype), _device(device), generator=generator)
    return C.rand(*size, dtype=dtype, device=device, requires_grad=requires_grad, generator=generator)


def randint(low, high=None, size=(), dtype=None, device=None, generator=None):
    if current_trace() is not None:
        if isinstance(high, (tuple, list)):
            low, high, size = 0, low, high
        if high is None:
            low, high = 0, low
        uniform = R.traced_uniform(C._size((size,)), dtypes.float32, _device(device), low, high, generator)
        return R.integers_from(uniform, low, high, dtype)
    return C.randint(low, high, size, dtype=dtype, device=device, generator=generator)


def randperm(n: int, dtype=None, device=None, generator=None):
    if current_trace() is not None:
        return R.traced_randperm(int(n), dtype, _device(device), generator)
    return C.randperm(n, dtype=dtype, device=device, generator=generator)


def randn_like(t, dtype=None, device=None, requires_grad=False, generator=None):
    if current_trace() is not None:
        return R.normal_as(t, dtype=dtype, generator=generator)
    return C.randn_like(t, dtype=dtype, device=device, requires_grad=requires_grad, generator=generator)


def rand_like(t, dtype=None, device=None, requires_grad=False, generator=None):
    if current_trace() is not None:
        return R.uniform_as(t, dtype=dtype, generator=generator)
    return C.rand_like(t, dtype=dtype, device=device, requires_grad=requires_grad, generator=generator)


def randint_like(t, low, high=None, dtype=None, device=None, generator=None):
    if current_trace() is not None:
        low, high = (0, low) if high is None else (low, high)
        return R.integers_from(R.uniform_as(t, low, high, dtypes.float32, generator), low, high, dtype or t.dtype)
    return C.randint_like(t, low, high, dtype=dtype, device=device, generator=generator)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    if t.is_global:
        return C.zeros_like(t, dtype=dtype, device=device, requires_grad=requires_grad)
    return zeros(*t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    if t.is_global:
        return C.ones_like(t, dtype=dtype, device=device, requires_grad=requires_grad)
    return ones(*t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return zeros_like(t, dtype, device, requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    if t.is_global:
        return C.full_like(t, fill_value, dtype=dtype, device=device, requires_grad=requires_grad)
    return full(tuple(t.shape), fill_value, dtype=dtype or t.dtype, device=device or t.device,
                requires_grad=requires_grad)


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
