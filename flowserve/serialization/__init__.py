"""``flow.save`` / ``flow.load``: graphs as deployable directories, state dicts as safetensors.

No load path unpickles anything: JSON is validated, tensors come from safetensors, and
PyTorch checkpoints go through a weights-only pickle reader that calls nothing but
flowserve's own tensor rebuilders (``torch_checkpoint``).

The package loads lazily (PEP 562): reading a saved directory (``read_graph_dir``, the
formats of ``flowserve.format``), as ``flowserve export`` and the server do, loads no
``nn``; ``save``, ``load``, ``save_graph`` and ``load_graph`` load it when first named.
"""

from __future__ import annotations

import importlib
import types

from flowserve.format.examples import ExampleSet, read_examples  # noqa: F401
from flowserve.format.manifest import MANIFEST, SavedGraphManifest, TensorSpec, read_manifest  # noqa: F401
from flowserve.format.tensors import read_tensors, write_bytes, write_tensors  # noqa: F401
from flowserve.serialization.graph_read import read_graph_dir  # noqa: F401

_HOMES = types.MappingProxyType({
    "save": "save_load", "load": "save_load", "STATE_JSON": "save_load", "STATE_TENSORS": "save_load",
    "save_graph": "graph_dir", "load_graph": "graph_dir",
    "encode_state": "tensors", "decode_state": "tensors",
})


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
