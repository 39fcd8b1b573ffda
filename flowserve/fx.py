"""``flow.fx``: the ``torch.fx`` hook that model files call at import.

``torch.fx.wrap("stochastic_depth")`` (torchvision's ``ops/stochastic_depth.py``) marks a
function as a leaf for FX's symbolic tracer. flowserve's ``nn.Graph`` traces by running the
code with lazy tensors, so every function is already traced through: ``wrap`` returns its
argument (a function, or a function's name) unchanged.

>>> import flowserve as flow
>>> flow.fx.wrap("stochastic_depth")
'stochastic_depth'
>>> @flow.fx.wrap
... def double(x):
...     return 2 * x
>>> double(3)
6
"""

from __future__ import annotations

from flowserve._missing import module_getattr as _module_getattr

__all__ = ["wrap"]

def wrap(fn_or_name):
    """Mark a function (or a module-level function's name) as an FX leaf; returns it unchanged."""
    if not (callable(fn_or_name) or isinstance(fn_or_name, str)):
        raise TypeError(f"fx.wrap expected a function or a function's name, got {type(fn_or_name).__name__}")
    return fn_or_name


__getattr__ = _module_getattr("flowserve.fx")  # torch.jit.script and the rest: what to use instead
