"""Reading a saved graph directory: its manifest, inference IR and state, all checked.

Every file the manifest lists must be inside the directory with its sha256; the IR's
JSON, value names, node attributes, state tensors and signature are checked before
anything runs. This side imports no ``nn`` (``flowserve export`` and the server read saved
directories with it); ``flowserve.serialization.graph_dir`` writes them and builds the
runnable ``LoadedGraph``::

    manifest, ir, params = read_graph_dir("mlp_dir")
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from flowserve import dtypes
from flowserve.errors import SavedGraphError
from flowserve.format.manifest import (
    GRAPH_FILE,
    MANIFEST,
    PARAMS_FILE,
    SavedGraphManifest,
    TensorSpec,
    check_inside,
    read_manifest,
)
from flowserve.format.quantization import check_quantization
from flowserve.format.tensors import read_tensors
from flowserve.ir.graph import GraphIR
from flowserve.ir.passes.dce import eliminate_dead_code
from flowserve.serialization.graph_check import check_ir_json, check_node_attributes, check_signature_shapes


def file_sha256(path: Path) -> str:
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
        check_inside(path, directory)
        if file_sha256(path) != digest:
            raise SavedGraphError(f"{path}: checksum mismatch (the file was changed or damaged after saving)")
    graph_path = directory / GRAPH_FILE
    try:
        doc = json.loads(graph_path.read_text(encoding="utf-8"))
        ir_json = doc["inference"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise SavedGraphError(f"{graph_path}: not a flowserve graph ({type(exc).__name__}: {exc})") from None
    except RecursionError:
        raise SavedGraphError(f"{graph_path}: not a flowserve graph (JSON nested too deeply)") from None
    check_ir_json(ir_json, graph_path)
    ir = GraphIR.from_json(ir_json, where=str(graph_path))
    _check_names(ir, graph_path)
    check_node_attributes(ir, graph_path)
    params = read_tensors(directory / PARAMS_FILE)
    _check_state(ir, params, directory / PARAMS_FILE)
    check_quantization(manifest.quantization, params, directory / MANIFEST)
    _check_signature(manifest, ir, directory / MANIFEST)
    check_signature_shapes(manifest, ir, directory / MANIFEST)
    eliminate_dead_code(ir)  # nodes no output needs are never run, whatever they would cost
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


def _signature(values, batch: int | None, named: dict | None = None) -> list[TensorSpec]:
    named = named or {}
    return [TensorSpec(name=v.name, dtype=v.dtype,
                       shape=[-1 if (i == 0 and batch is not None and d == batch) or i in named.get(v.name, {})
                              else d for i, d in enumerate(v.shape)])
            for v in values]


def input_batch(ir: GraphIR) -> int | None:
    """The batch size the inputs share in dim 0, if they do; it becomes the dynamic axis."""
    firsts = {v.shape[0] for v in ir.inputs if v.shape}
    return firsts.pop() if len(firsts) == 1 and all(v.shape for v in ir.inputs) else None


def graph_signature(ir: GraphIR, batch=..., named: dict | None = None) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The input and output specs of ``ir``: dim 0 is dynamic (-1) where the inputs share it
    (or where it equals ``batch``, the checked batch size; ``None``: nothing is dynamic), and
    so are the ``named`` dims (tensor name -> {axis: dim name})."""
    batch = input_batch(ir) if batch is ... else batch
    return _signature(ir.inputs, batch, named), _signature(ir.outputs, batch, named)
