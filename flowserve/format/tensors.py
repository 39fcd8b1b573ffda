"""Tensors on disk: safetensors files (no code runs when they load).

bfloat16 arrays are stored as safetensors' own ``BF16`` by viewing them as uint16 in
numpy and recording the dtype in the file's metadata.
"""

from __future__ import annotations

import json
import math
import os
import types
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from flowserve import dtypes
from flowserve.errors import SavedGraphError

DTYPES_KEY = "flowserve.dtypes"  # metadata: tensor name -> flowserve dtype name


def write_tensors(path: Path, arrays: dict) -> None:
    """Write ``arrays`` (name -> numpy array) to a safetensors file and fsync it."""
    stored, kinds = {}, {}
    for name, a in arrays.items():
        a = np.ascontiguousarray(a).reshape(np.shape(a))  # ascontiguousarray makes 0-d arrays 1-d
        kinds[name] = dtypes.from_numpy(a.dtype).name
        stored[name] = a.view(np.uint16) if kinds[name] == "bfloat16" else a
    data = st_save(stored, metadata={DTYPES_KEY: json.dumps(kinds)})
    write_bytes(path, data)


def write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_tensors(path: Path) -> dict:
    """name -> numpy array from a safetensors file; a damaged file is a SavedGraphError.

    The header is checked as the safetensors library checks it (offsets contiguous from 0,
    non-overlapping, ending at the end of the file, each one dtype x shape long), for the
    files it reads and for those holding BF16 tensors, which flowserve reads itself."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SavedGraphError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        header = _header(data)
        meta = _metadata(header)
        arrays = st_load(data) if not _has_bf16(header) else _load_with_bf16(data, header)
    except (SafetensorError, ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError,
            MemoryError) as exc:
        raise SavedGraphError(f"{path}: not a valid safetensors file ({type(exc).__name__}: "
                              f"{shown(str(exc), 200)})") from None
    for name, kind in _stored_kinds(meta, path).items():
        if kind == "bfloat16" and name in arrays:
            arrays[name] = arrays[name].view(dtypes.bfloat16.np)
    return arrays


def shown(text: str, limit: int = 80) -> str:
    """Text from a file, as it may appear in an error: printable, one line, short."""
    text = text.encode("ascii", "backslashreplace").decode("ascii").replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def _stored_kinds(meta: dict, path: Path) -> dict:
    """The ``flowserve.dtypes`` metadata entry: tensor name -> dtype name."""
    where = f"{path}: metadata entry {DTYPES_KEY!r}"
    try:
        kinds = json.loads(meta.get(DTYPES_KEY, "{}"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SavedGraphError(f"{where} is not JSON ({type(exc).__name__})") from None
    if not isinstance(kinds, dict) or not all(isinstance(v, str) for v in kinds.values()):
        raise SavedGraphError(f"{where}: expected an object of dtype names")
    return kinds


_ST_DTYPES = types.MappingProxyType({
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": dtypes.bfloat16.np,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_})
_MAX_HEADER = 100_000_000  # the safetensors library's limit


def _header(data: bytes) -> dict:
    if len(data) < 8:
        raise ValueError("the file is shorter than its 8-byte header length")
    n = int.from_bytes(data[:8], "little")
    if n > _MAX_HEADER or 8 + n > len(data):
        raise ValueError(f"header length {n} is past the file's end or the {_MAX_HEADER}-byte limit")
    header = json.loads(data[8:8 + n])
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    return header


def _has_bf16(header: dict) -> bool:
    """A BF16 tensor written by another tool (torch's safetensors): numpy's loader lacks BF16."""
    return DTYPES_KEY not in (header.get("__metadata__") or {}) and any(
        isinstance(v, dict) and v.get("dtype") == "BF16" for k, v in header.items() if k != "__metadata__")


def _load_with_bf16(data: bytes, header: dict) -> dict:
    """The tensors of a safetensors file holding BF16 ones, each copied once from the
    offsets, which the safetensors library's checks hold for."""
    body = memoryview(data)[8 + int.from_bytes(data[:8], "little"):]
    entries = sorted((_entry(name, entry) for name, entry in header.items() if name != "__metadata__"),
                     key=lambda e: e[3])
    arrays, expected = {}, 0
    for name, dtype, shape, begin, end in entries:
        if begin != expected:
            raise ValueError(f"tensor {shown(name)} starts at byte {begin}, not at {expected} where the previous "
                             "one ends (offsets must be contiguous and must not overlap)")
        if end - begin != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"tensor {shown(name)}: offsets {begin}..{end} do not hold "
                             f"{shown(str(shape))} of {dtype.itemsize}-byte elements")
        if end > len(body):
            raise ValueError(f"tensor {shown(name)} ends at byte {end}, past the data's {len(body)}")
        expected = end
        arrays[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape).copy()
    if expected != len(body):
        raise ValueError(f"the tensors hold {expected} bytes of the data's {len(body)}")
    return arrays


def _entry(name: str, entry) -> tuple:
    """(name, dtype, shape, begin, end) of one header entry, every field's type checked."""
    if not (isinstance(entry, dict) and entry.get("dtype") in _ST_DTYPES and isinstance(entry.get("shape"), list)
            and all(type(d) is int and d >= 0 for d in entry["shape"])
            and isinstance(entry.get("data_offsets"), list) and len(entry["data_offsets"]) == 2
            and all(type(v) is int and v >= 0 for v in entry["data_offsets"])):
        raise ValueError(f"tensor {shown(name)}: expected dtype, shape (sizes) and data_offsets (two integers)")
    begin, end = entry["data_offsets"]
    if end < begin:
        raise ValueError(f"tensor {shown(name)}: data_offsets end before they begin")
    return name, np.dtype(_ST_DTYPES[entry["dtype"]]), tuple(entry["shape"]), begin, end


def _metadata(header: dict) -> dict:
    meta = header.get("__metadata__", {}) or {}
    if not isinstance(meta, dict):
        raise ValueError("__metadata__ is not an object")
    return meta
