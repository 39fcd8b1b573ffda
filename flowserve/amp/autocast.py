"""``flow.autocast`` (also ``flow.amp.autocast`` and ``flow.cuda.amp.autocast``): PyTorch's
mixed-precision context, eagerly and inside ``nn.Graph.build``.

Inside the context, matrix products and convolutions read their float32 inputs rounded to
the low-precision dtype (bfloat16 by default on the CPU, float16 on CUDA, as PyTorch) and
round their result to it: the numbers of a low-precision kernel that accumulates in float32
(what tensor cores and PyTorch's CPU kernels do). Everything else — elementwise ops,
reductions, softmax, norms, losses — stays float32, so parameters are float32 master weights
and gradients flow through the roundings as through casts. The one difference from PyTorch:
the results are float32 tensors holding low-precision values, not float16/bfloat16 tensors,
so code that checks ``y.dtype`` sees float32. Inside ``nn.Graph.build`` the same casts are
recorded into the graph (``graph.config.enable_amp(True)`` does this for a whole graph).

>>> import flowserve as flow
>>> with flow.autocast("cpu"):
...     y = flow.nn.Linear(4, 2)(flow.randn(3, 4))
"""

from __future__ import annotations

import functools

from flowserve import dtypes
from flowserve.amp.grad_scaler import GradScaler
from flowserve.dispatch import Interpreter, current_interpreter, pop_interpreter, push_interpreter
from flowserve.ops import functional as F

DEFAULT_DTYPES = {"cpu": dtypes.bfloat16, "cuda": dtypes.float16}
COMPUTE_OPS = ("matmul", "conv", "conv_transpose")


class AutocastInterpreter(Interpreter):
    """Wraps the interpreter in force (eager or tracing): compute primitives read inputs
    rounded through ``low`` and round their results to it; everything else passes through."""

    __slots__ = ("inner", "low")

    def __init__(self, inner: Interpreter, low: dtypes.dtype):
        super().__init__(inner.grad_enabled)
        self.inner, self.low = inner, low

    @property
    def trace(self):
        return self.inner.trace

    def _rounded(self, t):
        if t.dtype is not dtypes.float32:
            return t
        token = push_interpreter(self.inner)  # the rounding casts bind normally
        try:
            return F.cast(F.cast(t, self.low), dtypes.float32)
        finally:
            pop_interpreter(token)

    def process(self, prim, inputs, attrs) -> tuple:
        if prim.name not in COMPUTE_OPS:
            return self.inner.process(prim, inputs, attrs)
        outputs = self.inner.process(prim, tuple(self._rounded(t) for t in inputs), attrs)
        return tuple(self._rounded(o) for o in outputs)

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
