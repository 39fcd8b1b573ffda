"""Saved graph directories: ``flowserve.json`` + ``graph.json`` + ``params.safetensors``.

Saving writes a temporary sibling directory, fsyncs it, and renames it into place, so a
crash leaves the old directory intact. Loading runs no code: JSON, validated; tensors from
safetensors; every file checked against the manifest's sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

import flowserve
from flowserve import dtypes
from flowserve.errors import SavedGraphError
from flowserve.ir.graph import GraphIR
from flowserve.nn.graph.inference import inference_traced
from flowserve.nn.graph.loaded import LoadedGraph
from flowserve.serialization.manifest import (
    FORMAT_VERSION,
    GRAPH_FILE,
    MANIFEST,
    PARAMS_FILE,
    SavedGraphManifest,
    TensorSpec,
    read_manifest,
)
from flowserve.serialization.tensors import read_tensors, write_bytes, write_tensors


def _signature(values, batch: int | None) -> list[TensorSpec]:
    return [TensorSpec(name=v.name, dtype=v.dtype,
                       shape=[-1 if i == 0 and batch is not None and d == batch else d for i, d in enumerate(v.shape)])
            for v in values]


def _batch(ir: GraphIR) -> int | None:
    """The batch size the inputs share in dim 0, if they do; it becomes the dynamic axis."""
    firsts = {v.shape[0] for v in ir.inputs if v.shape}
    return firsts.pop() if len(firsts) == 1 and all(v.shape for v in ir.inputs) else None


def graph_signature(ir: GraphIR) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The input and output specs of ``ir``: dim 0 is dynamic (-1) where the inputs share it."""
    batch = _batch(ir)
    return _signature(ir.inputs, batch), _signature(ir.outputs, batch)


def save_graph(graph, directory, model=None) -> None:
    """Write ``graph`` as a deployable directory; ``model`` picks the module a training
    graph deploys (see ``inference_traced``)."""
    traced = inference_traced(graph, model)
    ir = traced.ir
    arrays = {k: t.numpy() for k, t in traced.state.items()}
    arrays.update(traced.constants)
    if graph.training:  # also carry what resuming needs: optimizer state and the step
        for name, t in graph.parts.traced.state.items():
            arrays.setdefault(name, t.numpy())
    graph_bytes = json.dumps({"inference": ir.to_json()}, indent=1).encode()
    inputs, outputs = graph_signature(ir)
    manifest = SavedGraphManifest(
        format_version=FORMAT_VERSION, flowserve_version=flowserve.__version__, graph_name=graph.name,
        graph_class=type(graph).__name__, training=graph.training,
        inputs=inputs, outputs=outputs,
        config=dict(graph.config.options), files={GRAPH_FILE: "", PARAMS_FILE: ""})
    _write_atomically(Path(directory), manifest, graph_bytes, arrays)


def _write_atomically(target: Path, manifest: SavedGraphManifest, graph_bytes: bytes, arrays: dict) -> None:
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / MANIFEST).exists())):
        raise SavedGraphError(f"{target}: exists and is not a flowserve saved graph directory; "
                              "refusing to replace it (choose an empty or new directory)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        write_bytes(tmp / GRAPH_FILE, graph_bytes)
        write_tensors(tmp / PARAMS_FILE, arrays)
        manifest.files = {name: _sha256(tmp / name) for name in (GRAPH_FILE, PARAMS_FILE)}
        write_bytes(tmp / MANIFEST, manifest.model_dump_json(indent=1).encode())
        _fsync_dir(tmp)
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.rename(target, old)
        os.rename(tmp, target)
        _fsync_dir(target.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_graph_dir(directory) -> tuple[SavedGraphManifest, GraphIR, dict]:
    """Manifest, inference IR and state arrays of a saved directory, all checked."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    for name, digest in manifest.files.items():
        path = directory / name
        if not path.is_file():
            raise SavedGraphError(f"{path}: missing (listed in {MANIFEST})")
        if not path.resolve().is_relative_to(directory.resolve()):
            raise SavedGraphError(f"{path}: a link to a file outside the saved directory (refused)")
        if _sha256(path) != digest:
            raise SavedGraphError(f"{path}: checksum mismatch (the file was changed or damaged after saving)")
    graph_path = directory / GRAPH_FILE
    try:
        doc = json.loads(graph_path.read_text(encoding="utf-8"))
        ir_json = doc["inference"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise SavedGraphError(f"{graph_path}: not a flowserve graph ({type(exc).__name__}: {exc})") from None
    except RecursionError:
        raise SavedGraphError(f"{graph_path}: not a flowserve graph (JSON nested too deeply)") from None
    ir = GraphIR.from_json(ir_json, where=str(graph_path))
    _check_names(ir, graph_path)
    params = read_tensors(directory / PARAMS_FILE)
    _check_state(ir, params, directory / PARAMS_FILE)
    _check_signature(manifest, ir, directory / MANIFEST)
    return manifest, ir, params


def _check_names(ir: GraphIR, where: Path) -> None:
    """Value names are identifiers, never paths: no ``..`` segment, no leading ``/`` or
    ``\\``, no control characters, at most 512 characters."""
    for name in list(ir.values) + list(ir.state):
        parts = name.replace("\\", "/").split("/")
        bad = (not name or len(name) > 512 or ".." in parts or name.startswith(("/", "\\"))
               or any(ord(c) < 32 for c in name))
        if bad:
            raise SavedGraphError(f"{where}: tensor name {name[:80]!r} is not allowed "
                                  "(names may not be empty, path-like or contain control characters)")


def _check_state(ir: GraphIR, params: dict, where: Path) -> None:
    for name, v in ir.state.items():
        if name not in params:
            raise SavedGraphError(f"{where}: tensor {name!r} needed by the graph is missing")
        a = params[name]
        if dtypes.from_numpy(a.dtype).name != v.dtype or tuple(a.shape) != tuple(v.shape):
            raise SavedGraphError(f"{where}: tensor {name!r} is {tuple(a.shape)} {a.dtype}, "
                                  f"the graph expects {tuple(v.shape)} {v.dtype}")


def _check_signature(manifest: SavedGraphManifest, ir: GraphIR, where: Path) -> None:
    for kind, specs, values in (("input", manifest.inputs, ir.inputs), ("output", manifest.outputs, ir.outputs)):
        if [s.name for s in specs] != [v.name for v in values]:
            raise SavedGraphError(f"{where}: {kind}s {[s.name for s in specs]} do not match the graph's "
                                  f"{[v.name for v in values]}")
        for s, v in zip(specs, values):
            if s.dtype != v.dtype:
                raise SavedGraphError(f"{where}: {kind} {s.name!r} has dtype {s.dtype}, the graph's is {v.dtype}")


def load_graph(directory):
    manifest, ir, params = read_graph_dir(directory)
    return LoadedGraph(manifest, ir, {k: np.asarray(v) for k, v in params.items()})
