"""Tensors on disk: safetensors files (no code runs when they load) plus JSON.

bfloat16 arrays are stored as safetensors' own ``BF16`` by viewing them as uint16 in
numpy and recording the dtype in the file's metadata.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from flowserve import dtypes
from flowserve.errors import SavedGraphError
from flowserve.ops.creation import from_numpy
from flowserve.tensor import Tensor

_DTYPES_KEY = "flowserve.dtypes"


def write_tensors(path: Path, arrays: dict) -> None:
    """Write ``arrays`` (name -> numpy array) to a safetensors file and fsync it."""
    stored, kinds = {}, {}
    for name, a in arrays.items():
        a = np.ascontiguousarray(a).reshape(np.shape(a))  # ascontiguousarray makes 0-d arrays 1-d
        kinds[name] = dtypes.from_numpy(a.dtype).name
        stored[name] = a.view(np.uint16) if kinds[name] == "bfloat16" else a
    data = st_save(stored, metadata={_DTYPES_KEY: json.dumps(kinds)})
    write_bytes(path, data)


def write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_tensors(path: Path) -> dict:
    """name -> numpy array from a safetensors file; a damaged file is a SavedGraphError."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SavedGraphError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        arrays = st_load(data) if not _has_bf16(data) else _load_with_bf16(data, path)
        meta = _metadata(data)
    except (SafetensorError, ValueError, json.JSONDecodeError, KeyError, TypeError, AttributeError,
            RecursionError) as exc:
        raise SavedGraphError(f"{path}: not a valid safetensors file ({type(exc).__name__}: "
                              f"{str(exc)[:200]})") from None
    for name, kind in _stored_kinds(meta, path).items():
        if kind == "bfloat16" and name in arrays:
            arrays[name] = arrays[name].view(dtypes.bfloat16.np)
    return arrays


def _stored_kinds(meta: dict, path: Path) -> dict:
    """The ``flowserve.dtypes`` metadata entry: tensor name -> dtype name."""
    where = f"{path}: metadata entry {_DTYPES_KEY!r}"
    try:
        kinds = json.loads(meta.get(_DTYPES_KEY, "{}"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SavedGraphError(f"{where} is not JSON ({type(exc).__name__})") from None
    if not isinstance(kinds, dict) or not all(isinstance(v, str) for v in kinds.values()):
        raise SavedGraphError(f"{where}: expected an object of dtype names")
    return kinds


_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": dtypes.bfloat16.np,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _header(data: bytes) -> dict:
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n])


def _has_bf16(data: bytes) -> bool:
    """A BF16 tensor written by another tool (torch's safetensors): numpy's loader lacks BF16."""
    header = _header(data)
    return _DTYPES_KEY not in (header.get("__metadata__") or {}) and any(
        isinstance(v, dict) and v.get("dtype") == "BF16" for k, v in header.items() if k != "__metadata__")


def _load_with_bf16(data: bytes, path) -> dict:
    """The tensors of a safetensors file holding BF16 ones, read from the header's offsets
    (each checked against the buffer and the shape)."""
    n = int.from_bytes(data[:8], "little")
    body = memoryview(data)[8 + n:]
    arrays = {}
    for name, entry in _header(data).items():
        if name == "__metadata__":
            continue
        dtype = np.dtype(_ST_DTYPES[entry["dtype"]])
        begin, end = (int(v) for v in entry["data_offsets"])
        shape = tuple(int(d) for d in entry["shape"])
        if not 0 <= begin <= end <= len(body) or end - begin != int(np.prod(shape)) * dtype.itemsize:
            raise ValueError(f"tensor {name!r}: offsets {begin}..{end} do not hold {shape} {entry['dtype']}")
        arrays[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape).copy()
    return arrays


def _metadata(data: bytes) -> dict:
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    meta = header.get("__metadata__", {}) or {}
    if not isinstance(meta, dict):
        raise ValueError("__metadata__ is not an object")
    return meta


# -- nested state dicts ------------------------------------------------------------------


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


def decode_state(tree, arrays: dict, where: str):
    def walk(x):
        if isinstance(x, list):
            return [walk(v) for v in x]
        if not isinstance(x, dict):
            return x
        if "__tensor__" in x or "__ndarray__" in x:
            key = x.get("__tensor__", x.get("__ndarray__"))
            if key not in arrays:
                raise SavedGraphError(f"{where}: tensor {key!r} is missing from the tensor file")
            return from_numpy(arrays[key].copy()) if "__tensor__" in x else arrays[key]
        if "__dict__" in x:
            return {k: walk(v) for k, v in x["__dict__"]}
        if "__tuple__" in x:
            return tuple(walk(v) for v in x["__tuple__"])
        if "__dtype__" in x:
            return dtypes.from_name(x["__dtype__"])
        raise SavedGraphError(f"{where}: unknown entry {sorted(x)!r}")

    try:
        return walk(tree)
    except (TypeError, ValueError) as exc:
        raise SavedGraphError(f"{where}: malformed state ({exc})") from None
