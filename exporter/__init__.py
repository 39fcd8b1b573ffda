"""``flowserve.exporter``: IR -> ONNX lowering, fusion, checks and numeric parity.

>>> from flowserve.exporter import export
>>> result = export("saved_dir", "model.onnx")   # doctest: +SKIP

The package loads lazily (PEP 562): importing one of its light modules
(``flowserve.exporter.proof``), as the server does, loads
no lowering, op or tensor module; ``export`` and ``ExportResult`` load them when first named.
"""

import importlib
import sys
import types

_FROM_EXPORT = frozenset({"export", "ExportResult"})  # names of flowserve.exporter.export


def __getattr__(name: str):
    if name not in _FROM_EXPORT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.export"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


class _Package(types.ModuleType):
    """Keeps ``flowserve.exporter.export`` the function: loading the submodule of the same
    name binds the function it defines, not the module (as it would by default)."""

    def __setattr__(self, name: str, value) -> None:
        if name == "export" and isinstance(value, types.ModuleType):
            value = value.export
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__():
    return sorted(set(globals()) | _FROM_EXPORT)
