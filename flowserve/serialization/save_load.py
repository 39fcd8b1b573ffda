"""``flow.save`` and ``flow.load``: an ``nn.Graph`` as a deployable directory, a state dict
as a safetensors file (or a directory of one), a PyTorch checkpoint read weights-only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from flowserve.errors import SavedGraphError
from flowserve.format.manifest import MANIFEST
from flowserve.format.tensors import read_tensors, write_bytes, write_tensors
from flowserve.nn.graph.graph import Graph
from flowserve.ops.creation import from_numpy
from flowserve.serialization.graph_dir import load_graph, save_graph
from flowserve.serialization.state_layout import decode_state, encode_state
from flowserve.serialization.torch_checkpoint import is_pickle, is_torch_zip, read_torch_checkpoint

STATE_JSON = "state.json"
STATE_TENSORS = "state.safetensors"
_STRUCTURE_KEY = "flowserve.structure"


def save(obj, path, model=None, *, examples=None, tolerance: float | None = None,
         dynamic_dims: dict | None = None) -> None:
    """Save an ``nn.Graph`` (a deployable directory) or a state dict.

    For a training graph, ``model`` names the module to deploy
    (``flow.save(graph, "dir", model=graph.model)``); without it, ``graph.deploy()`` decides,
    and by default the last top-level module ``build()`` called that is not a loss.
    ``examples`` are reference inputs stored with the graph's outputs on them in
    ``dir/examples/`` (tensors, a list of batches, a DataLoader, or ``"last"``; by default
    an inference graph stores its last calls), reproduced within ``tolerance`` (relative,
    default 1e-4) by every export and by the server before it is ready.
    ``dynamic_dims`` names dims other than the batch that stay free, shared across inputs
    (``{"x": {0: "nodes"}, "adj": {0: "nodes", 1: "nodes"}}``); see docs/graph.md.

    A state dict goes to one safetensors file when ``path`` has a suffix (``model.pt``),
    else to a directory (OneFlow's habit), holding ``state.json`` and ``state.safetensors``.
    """
    if isinstance(obj, Graph):
        save_graph(obj, path, model, examples, tolerance, dynamic_dims)
        return
    if dynamic_dims is not None:
        raise TypeError("flow.save: dynamic_dims applies to an nn.Graph only")
    if model is not None:
        raise TypeError("flow.save: model= applies to an nn.Graph only")
    if examples is not None or tolerance is not None:
        raise TypeError(f"flow.save: examples and tolerance apply to an nn.Graph, not a {type(obj).__name__}")
    tree, arrays = encode_state(obj)
    path = Path(path)
    if path.suffix:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_tensors(path, {**arrays, _STRUCTURE_KEY: _structure_array(tree)})
        return
    path.mkdir(parents=True, exist_ok=True)
    write_tensors(path / STATE_TENSORS, arrays)
    write_bytes(path / STATE_JSON, json.dumps(tree).encode())


def _structure_array(tree):
    return np.frombuffer(json.dumps(tree).encode(), dtype=np.uint8).copy()


def load(path, map_location=None, weights_only: bool = True, *, max_bytes: int | None = None, **kwargs):
    """Load what ``save`` wrote (a runnable graph from a saved graph directory, or a state
    dict), a ``*.safetensors`` file, or a PyTorch checkpoint (``torch.save``'s zip format).

    PyTorch checkpoints are read as PyTorch's ``weights_only=True`` reads them, by a pickle
    reader that only rebuilds tensors, storages, OrderedDicts and plain containers: any
    other global is refused by name and nothing in the file runs. ``map_location`` and
    ``weights_only`` are accepted for PyTorch compatibility (tensors load on the CPU; loading
    is always weights-only). ``max_bytes`` bounds what a PyTorch checkpoint may make the
    reader decompress and hold (default: twice the file's size plus 64 MiB, plus 32 bytes per
    byte of its pickle as stored); a file that needs more, or nests containers over 100
    deep, is refused with one ``CheckpointError`` line. Storages are read once: tensors
    saved as views of one storage share memory.
    """
    path = Path(path)
    if path.is_dir():
        if (path / MANIFEST).exists():
            return load_graph(path)
        if not (path / STATE_JSON).is_file():
            raise SavedGraphError(f"{path}: neither a saved graph ({MANIFEST}) nor a saved state ({STATE_JSON})")
        try:
            tree = json.loads((path / STATE_JSON).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise SavedGraphError(f"{path / STATE_JSON}: not valid JSON ({type(exc).__name__})") from None
        return decode_state(tree, read_tensors(path / STATE_TENSORS), str(path))
    if not path.exists():
        raise SavedGraphError(f"{path}: no such file or directory")
    if is_torch_zip(path):
        return read_torch_checkpoint(path, max_bytes)
    if is_pickle(path):
        raise SavedGraphError(f"{path}: a raw pickle (PyTorch's legacy format, or pickle.dump); flowserve does "
                              "not unpickle files. Re-save it with torch.save (zip format) or as safetensors")
    arrays = read_tensors(path)
    structure = arrays.pop(_STRUCTURE_KEY, None)
    if structure is None:  # a plain safetensors file: a flat state dict
        return {k: from_numpy(v.copy()) for k, v in arrays.items()}
    try:
        tree = json.loads(structure.tobytes())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise SavedGraphError(f"{path}: damaged structure record ({type(exc).__name__})") from None
    return decode_state(tree, arrays, str(path))
