"""flowserve: OneFlow's programming model, with static graphs as a deployment format.

The package loads lazily (PEP 562): ``import flowserve.clients`` or
``python -m flowserve.clients`` loads no tensor, op, exporter or server module. The first
access to a public name (``flow.tensor``, ``flow.nn``, ...) loads ``flowserve.api``, the
public surface; subpackages load when first named.

>>> import flowserve as flow
>>> flow.ones(2, 3).sum().item()
6.0
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

_SUBPACKAGES = frozenset({
    "_C", "amp", "api", "autograd", "backends", "cli", "clients", "dispatch", "distributed", "dtypes", "env", "errors",
    "exporter", "format", "fx", "ir", "jit", "models", "nn", "ops", "optim", "protocol", "serialization", "server",
    "unittest", "utils",
})  # not "tensor" and "device": flow.tensor and flow.device are the public function and class


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    api = importlib.import_module(f"{__name__}.api")
    try:
        value = getattr(api, name)
    except AttributeError:  # a PyTorch/OneFlow name flowserve lacks: say what to use instead
        raise importlib.import_module(f"{__name__}._missing").missing(__name__, name) from None
    globals()[name] = value  # later lookups skip __getattr__
    return value


class _Package(types.ModuleType):
    """Keeps ``flow.tensor`` and ``flow.device`` the public function and class: loading the
    submodules of the same names does not replace them (as it would by default)."""

    def __setattr__(self, name: str, value) -> None:
        if name in ("tensor", "device") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__():
    return sorted(set(globals()) | set(importlib.import_module(f"{__name__}.api").__all__) | _SUBPACKAGES)
