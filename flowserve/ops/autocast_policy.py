"""Which dtype an op computes in under ``flow.autocast`` (PyTorch's CPU autocast lists),
for the public functions; ``flowserve.amp.autocast`` holds the context itself.

- ``lower_precision``: ``linear``, ``matmul``/``mm``/``bmm``, ``einsum``, the convolutions and
  transposed convolutions, ``scaled_dot_product_attention``, multi-head attention, the LSTM
  layer and ``prelu``:
  float32 tensor arguments are read rounded to the autocast dtype, the op computes in
  float32 and its result is a float16/bfloat16 tensor, rounded once;
- ``float32``: the losses and the 3-d pools of PyTorch's float32 list: low-precision
  arguments are cast up, so the result is float32;
- ``like_input``: the normalisations, which PyTorch's CPU kernels run in float32 on a
  low-precision input with float32 parameters and return in the input's dtype.

Every other op follows the ordinary promotion rules (``bf16 + f32`` is float32,
``bf16 + 1.0`` stays bfloat16); under autocast a primitive with low-precision inputs
computes in float32 and rounds its result once (``AutocastInterpreter``), as PyTorch's CPU
kernels do. The policies apply to the public functions only: composites that use a matrix
product or a convolution inside (average pooling, ``unfold``, ``embedding_bag``) keep the
dtype of their inputs, as in PyTorch.
"""

from __future__ import annotations

import functools

from flowserve import dtypes
from flowserve.dispatch import current_interpreter
from flowserve.ops import core_functions
from flowserve.ops import math_functions
LOW = (dtypes.float16, dtypes.bfloat16)


def autocast_dtype():
    """The dtype of the ``flow.autocast`` in force, or ``None``."""
    return getattr(current_interpreter(), "autocast_dtype", None)


def _cast_args(args, kwargs, wanted, source, through=None):
    """Tensor arguments of a dtype in ``source`` cast to ``wanted`` (rounded through
    ``through`` first, when given), inside tuples and lists too ((weight, bias) pairs)."""
    def cast(v):
        if isinstance(v, (tuple, list)):
            return type(v)(cast(u) for u in v)
        if getattr(v, "dtype", None) not in source or not hasattr(v, "_data"):
            return v
        return core_functions.cast(
            core_functions.cast(v, through) if through is not None and v.dtype is not through else v, wanted
        )
    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


def _cast_results(out, wanted):
    if isinstance(out, (tuple, list)):
        return type(out)(_cast_results(o, wanted) for o in out)
    return core_functions.cast(out, wanted) if getattr(out, "dtype", None) is dtypes.float32 else out


def lower_precision(fn):
    """PyTorch's lower-precision list: float32 (and float16/bfloat16) tensor arguments are
    read rounded to the autocast dtype, the op computes in float32 (a matrix product
    accumulates in float32, the bias is added there) and its result is rounded once to the
    autocast dtype and returned in it."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        low = autocast_dtype()
        if low is None:
            return fn(*args, **kwargs)
        args, kwargs = _cast_args(args, kwargs, dtypes.float32, (dtypes.float32,) + LOW, through=low)
        return _cast_results(fn(*args, **kwargs), low)
    return wrapped


def float32(fn):
    """Low-precision tensor arguments in float32 (PyTorch's float32 list)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if autocast_dtype() is not None:
            args, kwargs = _cast_args(args, kwargs, dtypes.float32, LOW)
        return fn(*args, **kwargs)
    return wrapped


def like_input(fn):
    """A low-precision first argument: computed in float32, returned in its dtype."""
    @functools.wraps(fn)
    def wrapped(x, *args, **kwargs):
        if autocast_dtype() is None or getattr(x, "dtype", None) not in LOW:
            return fn(x, *args, **kwargs)
        low = x.dtype
        (x, *args), kwargs = _cast_args((x, *args), kwargs, dtypes.float32, LOW)
        out = fn(x, *args, **kwargs)
        return core_functions.cast(out, low) if getattr(out, "dtype", None) is dtypes.float32 else out
    return wrapped


# the public spellings (flow.matmul, flow.mm, flow.bmm, Tensor.__matmul__ / matmul / mm / bmm);
# composites call core_functions.matmul and keep their inputs' dtype
matmul = lower_precision(core_functions.matmul)
mm = matmul
bmm = lower_precision(math_functions.bmm)
einsum = lower_precision(math_functions.einsum)
