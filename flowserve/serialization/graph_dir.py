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
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

import flowserve
from flowserve.errors import SavedGraphError
from flowserve.nn.graph.loaded import LoadedGraph
from flowserve.format.examples import ExampleSet
from flowserve.format.manifest import (
    BASE_VERSION,
    EXAMPLES_DIR,
    NAMED_DIMS_VERSION,
    GRAPH_FILE,
    MANIFEST,
    PARAMS_FILE,
    SavedGraphManifest,
)
from flowserve.format.tensors import write_bytes, write_tensors
from flowserve.serialization.example_batches import collect_examples
from flowserve.serialization.graph_read import file_sha256, graph_signature, input_batch, read_graph_dir
from flowserve.serialization.quantization_record import quantization_record


def save_graph(graph, directory, model=None, examples=None, tolerance: float | None = None,
               dynamic_dims: dict | None = None) -> None:
    """Write ``graph`` as a deployable directory from ``graph.deployable_state(model,
    dynamic_dims)`` (what its traces hold: an inference graph's calls traced it already, a
    training graph traces its deployed module once); ``examples`` and ``tolerance`` as
    described in ``flowserve.serialization.example_batches``; ``dynamic_dims`` as in
    ``flowserve.nn.graph.named_dims``."""
    deployed = graph.deployable_state(model, dynamic_dims)
    ir, batch, named = deployed.ir, deployed.batch, deployed.dynamic_dims
    if deployed.batch_note:
        warnings.warn(f"flow.save({deployed.name}): the saved graph runs at batch size {input_batch(ir)} only: "
                      f"{deployed.batch_note}", UserWarning, stacklevel=3)
    arrays = dict(deployed.arrays)
    graph_bytes = json.dumps({"inference": ir.to_json()}, indent=1).encode()
    inputs, outputs = graph_signature(ir, batch, named)
    manifest = SavedGraphManifest(
        batch_note=deployed.batch_note, format_version=NAMED_DIMS_VERSION if named else BASE_VERSION,
        flowserve_version=flowserve.__version__, graph_name=deployed.name, dynamic_dims=named,
        graph_class=deployed.graph_class, training=deployed.training,
        inputs=inputs, outputs=outputs,
        config=dict(deployed.config), files={GRAPH_FILE: "", PARAMS_FILE: ""},
        quantization=quantization_record(ir))
    example_set = collect_examples(deployed, ir, arrays, examples, tolerance)
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
        manifest.files = {name: file_sha256(tmp / name) for name in (GRAPH_FILE, PARAMS_FILE)}
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


def load_graph(directory):
    manifest, ir, params = read_graph_dir(directory)
    return LoadedGraph(manifest, ir, {k: np.asarray(v) for k, v in params.items()})
