"""Nested state dicts <-> a JSON structure plus flat arrays, for ``flow.save`` / ``flow.load``.

The files themselves are read and written by ``flowserve.format.tensors`` (safetensors).
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.errors import SavedGraphError
from flowserve.format.tensors import shown
from flowserve.ops.creation import from_numpy
from flowserve.tensor import Tensor

def encode_state(obj) -> tuple[object, dict]:
    """A JSON-able structure with tensors replaced by references, and the arrays."""
    arrays: dict = {}

    def walk(x, path: str):
        if isinstance(x, Tensor):
            arrays[path] = x.numpy()
            return {"__tensor__": path}
        if isinstance(x, np.ndarray):
            arrays[path] = x
            return {"__ndarray__": path}
        if isinstance(x, dict):
            return {"__dict__": [[k, walk(v, f"{path}.{k}" if path else str(k))] for k, v in x.items()]}
        if isinstance(x, (list, tuple)):
            items = [walk(v, f"{path}.{i}") for i, v in enumerate(x)]
            return {"__tuple__": items} if isinstance(x, tuple) else items
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, (np.integer, np.floating, np.bool_)):
            return x.item()
        if isinstance(x, dtypes.dtype):
            return {"__dtype__": x.name}
        raise TypeError(f"flow.save cannot store a {type(x).__name__} at {path!r}: only tensors, numbers, "
                        "strings, None, lists, tuples and dicts (no pickled objects)")

    return walk(obj, ""), arrays


MAX_DEPTH = 100  # containers inside containers in a structure record


def decode_state(tree, arrays: dict, where: str):
    """The object ``encode_state`` described, its tensors from ``arrays``: one tensor per
    stored array however often the record names it, containers at most MAX_DEPTH deep."""
    tensors: dict = {}

    def tensor_of(key):
        if key not in tensors:
            tensors[key] = from_numpy(arrays[key].copy())
        return tensors[key]

    def walk(x, depth: int):
        if depth > MAX_DEPTH:
            raise SavedGraphError(f"{where}: the structure nests more than {MAX_DEPTH} deep")
        if isinstance(x, list):
            return [walk(v, depth + 1) for v in x]
        if not isinstance(x, dict):
            return x
        if "__tensor__" in x or "__ndarray__" in x:
            key = x.get("__tensor__", x.get("__ndarray__"))
            if not isinstance(key, str) or key not in arrays:
                raise SavedGraphError(f"{where}: tensor {shown(str(key))} is missing from the tensor file")
            return tensor_of(key) if "__tensor__" in x else arrays[key]
        if "__dict__" in x:
            return {k: walk(v, depth + 1) for k, v in x["__dict__"]}
        if "__tuple__" in x:
            return tuple(walk(v, depth + 1) for v in x["__tuple__"])
        if "__dtype__" in x:
            return dtypes.from_name(x["__dtype__"])
        raise SavedGraphError(f"{where}: unknown entry {shown(str(sorted(x)))}")

    try:
        return walk(tree, 0)
    except (TypeError, ValueError) as exc:
        raise SavedGraphError(f"{where}: malformed state ({type(exc).__name__}: {shown(str(exc), 200)})") from None
