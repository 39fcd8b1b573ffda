"""``flow.jit``: the hooks of ``torch.jit`` that model files call, so ported code runs unchanged.

flowserve has no TorchScript: a static graph is an ``nn.Graph`` (traced from ``build()``, saved
with ``flow.save(graph, dir)``). What model code asks of ``torch.jit`` is answered as a user
expects: ``is_scripting()`` is False (nothing is ever scripted); ``is_tracing()`` is True while
an ``nn.Graph`` traces ``build()``, as ``torch.jit.is_tracing()`` is True under
``torch.jit.trace``/``torch.onnx.export`` (the code behind it takes the trace-friendly path),
and False in eager mode; ``ignore``, ``unused`` and ``export`` are decorators that return
what they decorate; ``annotate`` returns its value.

>>> import flowserve as flow
>>> flow.jit.is_scripting(), flow.jit.is_tracing()
(False, False)
>>> @flow.jit.unused
... def helper(x):
...     return x + 1
>>> helper(1)
2
"""

from __future__ import annotations

from typing import Final  # noqa: F401 - torch.jit.Final: a class constant's annotation

from flowserve._missing import module_getattr as _module_getattr
from flowserve.dispatch import current_trace as _current_trace

__all__ = ["Final", "annotate", "export", "ignore", "is_scripting", "is_tracing", "unused"]


def is_scripting() -> bool:
    """False: flowserve never compiles Python to TorchScript."""
    return False


def is_tracing() -> bool:
    """True while an ``nn.Graph`` traces ``build()``, False in eager mode."""
    return _current_trace() is not None


def _decorator(fn=None, **_options):
    """``@hook``, ``@hook()`` and ``@hook(drop=True)`` all return the function unchanged."""
    if fn is None:
        return lambda f: f
    return fn


def ignore(fn=None, **options):
    """``torch.jit.ignore``: leaves the function to Python (here it always is)."""
    return _decorator(fn, **options)


def unused(fn=None, **options):
    """``torch.jit.unused``: a method the compiler should skip (here it runs as written)."""
    return _decorator(fn, **options)


def export(fn=None, **options):
    """``torch.jit.export``: a method to compile as well (here nothing is compiled)."""
    return _decorator(fn, **options)


def annotate(the_type, value):
    """``torch.jit.annotate(List[Tensor], [])``: the value, unchanged."""
    return value


__getattr__ = _module_getattr("flowserve.jit")  # torch.jit.script and the rest: what to use instead
