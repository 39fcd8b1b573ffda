"""``flow.autocast`` (also ``flow.amp.autocast`` and ``flow.cuda.amp.autocast``): PyTorch's
mixed-precision context, eagerly and inside ``nn.Graph.build``.

Inside the context the ops follow PyTorch's CPU autocast lists
(``flowserve.ops.autocast_policy``): matrix products, ``linear`` and the convolutions cast
their float32 inputs to the low-precision dtype (bfloat16 by default on the CPU, float16 on
CUDA, as PyTorch) and return tensors of that dtype; the losses cast low-precision inputs up
and return float32; the normalisations return their input's dtype; every other op follows
the usual promotion (``bf16 + f32`` is float32). A primitive given low-precision inputs
computes in float32 and rounds its result to the low-precision dtype once, as PyTorch's
CPU kernels do (a matrix product accumulates in float32). Parameters stay float32 master
weights; gradients flow through the casts, so a parameter's gradient is float32. Leaving
the context restores the float32 behaviour (tensors already made keep their dtype).

Inside ``nn.Graph.build`` the same casts are recorded into the graph, so a graph gives the
numbers and dtypes of eager mode (``graph.config.enable_amp(True)`` is the graph-wide pass,
which keeps float32 tensors holding low-precision values).

>>> import flowserve as flow
>>> with flow.autocast("cpu"):
...     y = flow.nn.Linear(4, 2)(flow.randn(3, 4))
>>> y.dtype
flowserve.bfloat16
"""

from __future__ import annotations

import functools

from flowserve import dtypes
from flowserve.amp.grad_scaler import GradScaler
from flowserve.dispatch import Interpreter, current_interpreter, pop_interpreter, push_interpreter
from flowserve.ops import functional as ops_functional
DEFAULT_DTYPES = {"cpu": dtypes.bfloat16, "cuda": dtypes.float16}
LOW = (dtypes.float16, dtypes.bfloat16)


class AutocastInterpreter(Interpreter):
    """Wraps the interpreter in force (eager or tracing) and marks the autocast dtype for
    the public functions' policies (``flowserve.ops.autocast_policy``). A primitive with
    low-precision floating inputs reads them as float32 (exactly), computes in float32 and
    rounds its floating results to that low-precision dtype: one rounding per op."""

    __slots__ = ("inner", "low")

    def __init__(self, inner: Interpreter, low: dtypes.dtype):
        super().__init__(inner.grad_enabled)
        self.inner, self.low = inner, low

    @property
    def trace(self):
        return self.inner.trace

    @property
    def autocast_dtype(self):
        return self.low

    def _cast(self, t, dtype):
        token = push_interpreter(self.inner)  # the casts bind normally
        try:
            return ops_functional.cast(t, dtype)
        finally:
            pop_interpreter(token)

    def process(self, prim, inputs, attrs) -> tuple:
        if prim.name == "cast":
            return self.inner.process(prim, inputs, attrs)
        lows = [t.dtype for t in inputs if t.dtype in LOW]
        if not lows:
            return self.inner.process(prim, inputs, attrs)
        low = lows[0]
        wide = tuple(self._cast(t, dtypes.float32) if t.dtype in LOW else t for t in inputs)
        outputs = self.inner.process(prim, wide, attrs)
        return tuple(self._cast(o, low) if o.dtype is dtypes.float32 else o for o in outputs)

    def with_grad(self, enabled: bool) -> "AutocastInterpreter":
        return AutocastInterpreter(self.inner.with_grad(enabled), self.low)


class autocast:  # noqa: N801 - PyTorch's name
    """``with flow.autocast(device_type, dtype=None, enabled=True):`` (also a decorator)."""

    def __init__(self, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None):
        device_type = str(device_type).split(":")[0]
        if device_type not in DEFAULT_DTYPES:
            raise ValueError(f"autocast expected device_type 'cpu' or 'cuda', got {device_type!r}")
        self.device_type = device_type
        self.fast_dtype = dtypes.as_dtype(dtype) if dtype is not None else DEFAULT_DTYPES[device_type]
        if self.fast_dtype not in (dtypes.float16, dtypes.bfloat16):
            raise ValueError(f"autocast expected dtype float16 or bfloat16, got {self.fast_dtype}")
        self.enabled = bool(enabled)
        self._tokens: list = []

    def __enter__(self):
        current = current_interpreter()
        inner = current.inner if isinstance(current, AutocastInterpreter) else current
        self._tokens.append(push_interpreter(AutocastInterpreter(inner, self.fast_dtype) if self.enabled else inner))
        return self

    def __exit__(self, *exc) -> bool:
        pop_interpreter(self._tokens.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self.enabled):
                return fn(*args, **kwargs)

        return wrapped


def is_autocast_enabled() -> bool:
    return isinstance(current_interpreter(), AutocastInterpreter)


class cuda_amp:  # noqa: N801 - PyTorch's torch.cuda.amp
    """``flow.cuda.amp``: PyTorch's older spelling of ``flow.amp``'s ``autocast`` (float16 by
    default, as on CUDA) and ``GradScaler``."""

    @staticmethod
    def autocast(enabled: bool = True, dtype=None, cache_enabled=None):
        return autocast("cuda", dtype=dtype, enabled=enabled)

    GradScaler = GradScaler
