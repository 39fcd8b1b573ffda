"""Saved graph directories: ``flowserve.json`` + ``graph.json`` + ``params.safetensors``.

Saving writes a temporary sibling directory, fsyncs it, and swaps it into place with one
atomic exchange (Linux), so at every instant the target is the old or the new directory,
whole; temporaries of killed saves are removed by the next save. Loading runs no code:
JSON, validated field by field (``graph_check``); tensors from safetensors; every file
checked against the manifest's sha256; links out of the directory refused.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

import flowserve
from flowserve import dtypes
from flowserve.errors import SavedGraphError
from flowserve.ir.graph import GraphIR
from flowserve.nn.graph.inference import deployable_batch, inference_traced
from flowserve.nn.graph.loaded import LoadedGraph
from flowserve.nn.graph.named_dims import check_named_dims, grown_shapes, normalize, retrace_failure, verify_lowering
from flowserve.ir.passes.dce import eliminate_dead_code
from flowserve.serialization.graph_check import check_ir_json, check_node_attributes, check_signature_shapes
from flowserve.serialization.examples import ExampleSet, collect_examples
from flowserve.serialization.manifest import (
    BASE_VERSION,
    EXAMPLES_DIR,
    NAMED_DIMS_VERSION,
    GRAPH_FILE,
    MANIFEST,
    PARAMS_FILE,
    SavedGraphManifest,
    TensorSpec,
    check_inside,
    read_manifest,
)
from flowserve.serialization.quantization import check_quantization, quantization_record
from flowserve.serialization.tensors import read_tensors, write_bytes, write_tensors


def _signature(values, batch: int | None, named: dict | None = None) -> list[TensorSpec]:
    named = named or {}
    return [TensorSpec(name=v.name, dtype=v.dtype,
                       shape=[-1 if (i == 0 and batch is not None and d == batch) or i in named.get(v.name, {})
                              else d for i, d in enumerate(v.shape)])
            for v in values]


def _batch(ir: GraphIR) -> int | None:
    """The batch size the inputs share in dim 0, if they do; it becomes the dynamic axis."""
    firsts = {v.shape[0] for v in ir.inputs if v.shape}
    return firsts.pop() if len(firsts) == 1 and all(v.shape for v in ir.inputs) else None


def graph_signature(ir: GraphIR, batch=..., named: dict | None = None) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The input and output specs of ``ir``: dim 0 is dynamic (-1) where the inputs share it
    (or where it equals ``batch``, the checked batch size; ``None``: nothing is dynamic), and
    so are the ``named`` dims (tensor name -> {axis: dim name})."""
    batch = _batch(ir) if batch is ... else batch
    return _signature(ir.inputs, batch, named), _signature(ir.outputs, batch, named)


def _deployable_dims(graph, traced, model, dynamic_dims) -> tuple[int | None, str | None, dict]:
    """(batch, batch note, named dims) of the deployable trace: with named dims at axis 0 the
    graph has no separate batch axis; otherwise the batch is checked as without them."""
    named = normalize(dynamic_dims, traced.ir) if dynamic_dims else {}
    if named:
        try:
            other = inference_traced(graph, model, shapes=grown_shapes(traced.ir, named))
        except Exception as exc:  # build() cannot run at other sizes: it fixes them
            raise retrace_failure(exc, traced.ir, named) from None
        named = check_named_dims(traced, other, named)
        verify_lowering(traced, other, named)
    if any(0 in axes for t, axes in named.items() if t in {v.name for v in traced.ir.inputs}):
        return None, None, named
    batch, note = deployable_batch(graph, traced, model)
    return batch, note, named


def save_graph(graph, directory, model=None, examples=None, tolerance: float | None = None,
               dynamic_dims: dict | None = None) -> None:
    """Write ``graph`` as a deployable directory; ``model`` picks the module a training
    graph deploys (see ``inference_traced``); ``examples`` and ``tolerance`` as described
    in ``flowserve.serialization.examples``; ``dynamic_dims`` as in
    ``flowserve.nn.graph.named_dims``."""
    traced = inference_traced(graph, model)
    ir = traced.ir
    batch, batch_note, named = _deployable_dims(graph, traced, model, dynamic_dims)
    if batch_note:
        warnings.warn(f"flow.save({graph.name}): the saved graph runs at batch size {_batch(ir)} only: "
                      f"{batch_note}", UserWarning, stacklevel=3)
    arrays = {k: t.numpy() for k, t in traced.state.items()}
    arrays.update(traced.constants)
    if graph.training:  # also carry what resuming needs: optimizer state and the step
        parallel = graph.parts.parallel
        local = parallel.rank_local_state() if parallel is not None else set()
        for name, t in graph.parts.traced.state.items():
            if name not in local:  # (a ZeRO shard is this rank's part, not the graph's state)
                arrays.setdefault(name, t.numpy())
    graph_bytes = json.dumps({"inference": ir.to_json()}, indent=1).encode()
    inputs, outputs = graph_signature(ir, batch, named)
    manifest = SavedGraphManifest(
        batch_note=batch_note, format_version=NAMED_DIMS_VERSION if named else BASE_VERSION,
        flowserve_version=flowserve.__version__, graph_name=graph.name, dynamic_dims=named,
        graph_class=type(graph).__name__, training=graph.training,
        inputs=inputs, outputs=outputs,
        config=dict(graph.config.options), files={GRAPH_FILE: "", PARAMS_FILE: ""},
        quantization=quantization_record(ir))
    example_set = collect_examples(graph, ir, arrays, examples, tolerance)
    _write_atomically(Path(directory), manifest, graph_bytes, arrays, example_set)


def _write_atomically(target: Path, manifest: SavedGraphManifest, graph_bytes: bytes, arrays: dict,
                      example_set: ExampleSet | None = None) -> None:
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / MANIFEST).exists())):
        raise SavedGraphError(f"{target}: exists and is not a flowserve saved graph directory; "
                              "refusing to replace it (choose an empty or new directory)")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    try:
        write_bytes(tmp / GRAPH_FILE, graph_bytes)
        write_tensors(tmp / PARAMS_FILE, arrays)
        manifest.files = {name: _sha256(tmp / name) for name in (GRAPH_FILE, PARAMS_FILE)}
        if example_set is not None:
            written = example_set.write(tmp / EXAMPLES_DIR)
            manifest.examples = {f"{EXAMPLES_DIR}/{name}": digest for name, digest in written.items()}
        unset = {"quantization"} if manifest.quantization is None else None  # manifests without QAT unchanged
        write_bytes(tmp / MANIFEST, manifest.model_dump_json(indent=1, exclude=unset).encode())
        _fsync_dir(tmp)
        _replace(tmp, target)
        _fsync_dir(target.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the new files (failure) or the old ones


def _replace(tmp: Path, target: Path) -> None:
    """Put ``tmp`` at ``target``; the old ``target`` (if any) ends up at ``tmp``.

    Linux exchanges the two in one atomic ``renameat2(RENAME_EXCHANGE)``, so ``target``
    names a complete directory at every instant; elsewhere (or on file systems without
    it) the old directory is moved aside first and a crash between the two renames
    leaves it as ``.NAME.old-PID``, which the next save cleans up.
    """
    if not target.exists():
        os.rename(tmp, target)
        return
    if _exchange(tmp, target):
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    os.rename(target, old)
    os.rename(tmp, target)
    os.rename(old, tmp)


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap directories ``a`` and ``b``; False where the OS cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a libc without it
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return done == 0


_SAVED_FILES = {MANIFEST, GRAPH_FILE, PARAMS_FILE, "examples", "reports"}


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove what killed saves of ``target`` left beside it (``.NAME.tmp-PID-*`` and
    ``.NAME.old-PID`` of processes no longer running); returns what was removed.
    Only folders holding nothing but saved-graph files are touched."""
    removed = []
    for path in target.parent.glob(f".{glob.escape(target.name)}.*"):
        pid = _owner_pid(path.name[len(target.name) + 2:])
        if pid is None or _pid_alive(pid) or not path.is_dir() or path.is_symlink():
            continue
        if all(entry.name in _SAVED_FILES for entry in path.iterdir()):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _owner_pid(suffix: str) -> int | None:
    for prefix in ("tmp-", "old-"):
        if suffix.startswith(prefix):
            digits = suffix[len(prefix):].split("-", 1)[0]
            return int(digits) if digits.isdigit() and len(digits) < 10 else None
    return None


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another thread of this process may be saving right now
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        check_inside(path, directory)
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


def load_graph(directory):
    manifest, ir, params = read_graph_dir(directory)
    return LoadedGraph(manifest, ir, {k: np.asarray(v) for k, v in params.items()})
