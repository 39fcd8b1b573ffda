"""Autograd: the tape (``tape``), grad mode switches (``grad_mode``) and the backward
core (``engine``: ``gradients``, ``backward``, ``grad``).

The package imports its modules on first use (PEP 562), so that the op registry can
import ``flowserve.autograd.tape`` without loading the engine, which is built on the ops.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "backward": "engine", "grad": "engine", "gradients": "engine",
    "enable_grad": "grad_mode", "inference_mode": "grad_mode", "is_grad_enabled": "grad_mode",
    "no_grad": "grad_mode", "set_grad_enabled": "grad_mode",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'flowserve.autograd' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"flowserve.autograd.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
