"""Reference examples of a saved graph: real input batches and the graph's outputs on them.

``flow.save(graph, dir, examples=...)`` stores them in ``dir/examples/``: one safetensors
file per batch (``input.<name>`` and ``output.<name>`` tensors) and ``examples.json``,
which says how they were made (provenance), the tolerance the outputs must be
reproduced within, and which batch files there are. The manifest lists every file with
its sha256, so a changed example is refused like a changed weight. Export proves each
model it writes on these examples, and the server verifies its sessions on them before
it reports ready.

Examples can be given as a tensor (one batch of a one-input graph), a tuple (one batch,
one tensor per input), a list of those (several batches), a ``DataLoader`` or any other
iterable of batches (the first ``len(inputs)`` items of each batch are the inputs, the
rest, labels say, are dropped), or ``"last"``: the inputs of the graph's last calls,
which is what an inference graph that has been called stores by default.

>>> flow.save(graph, "mlp_dir", examples=loader)          # doctest: +SKIP
>>> read_examples("mlp_dir").rows                          # doctest: +SKIP
32
"""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import flowserve
from flowserve import dtypes
from flowserve.errors import SavedGraphError
from flowserve.ir.interpreter import run_ir
from flowserve.serialization.manifest import EXAMPLES_DIR, FILE_NAME, read_manifest
from flowserve.serialization.tensors import read_tensors, write_bytes, write_tensors
from flowserve.tensor import Tensor
from flowserve.utils.data import DataLoader

INDEX_FILE = "examples.json"
DEFAULT_RTOL = 1e-4  # float32 networks differ between runtimes by rounding, ~1e-5 of the output scale
DEFAULT_MAX_BATCHES = 4  # batches taken from a DataLoader, or last calls recorded
LAST_CALLS_MAX_ROWS = 64  # rows kept from the last calls (a saved directory stays small)


class ExampleBatchEntry(BaseModel):
    """One stored batch: its file (inside the examples folder) and its number of rows."""

    model_config = ConfigDict(extra="forbid")
    file: str = Field(pattern=FILE_NAME.pattern)
    rows: int = Field(ge=0)


class ExampleIndex(BaseModel):
    """``examples.json``: what the examples are, where they came from, how close to match."""

    model_config = ConfigDict(extra="forbid")
    format_version: Literal[1] = 1
    rtol: float = Field(gt=0, le=1)
    inputs: list[str]
    outputs: list[str]
    batches: list[ExampleBatchEntry] = Field(min_length=1)
    provenance: dict = Field(default_factory=dict)


@dataclass
class ExampleBatch:
    """Inputs (name -> array) and the reference outputs on them (name -> array)."""

    inputs: dict
    outputs: dict

    @property
    def rows(self) -> int:
        first = next(iter(self.inputs.values()), None)
        return int(first.shape[0]) if first is not None and first.ndim else 1


@dataclass
class ExampleSet:
    """The examples of a graph: batches, the tolerance (``rtol``; the absolute tolerance
    is ``rtol * max|reference|`` per output) and their provenance."""

    batches: list
    rtol: float = DEFAULT_RTOL
    provenance: dict = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.batches)

    @property
    def input_names(self) -> list:
        return list(self.batches[0].inputs) if self.batches else []

    @property
    def output_names(self) -> list:
        return list(self.batches[0].outputs) if self.batches else []

    def index(self) -> ExampleIndex:
        entries = [ExampleBatchEntry(file=f"batch_{i:03d}.safetensors", rows=b.rows)
                   for i, b in enumerate(self.batches)]
        return ExampleIndex(rtol=self.rtol, inputs=self.input_names, outputs=self.output_names,
                            batches=entries, provenance=self.provenance)

    def write(self, folder: Path) -> dict:
        """Write the batches and ``examples.json`` into ``folder`` (created); returns
        file name -> sha256 of what was written."""
        folder.mkdir(parents=True, exist_ok=True)
        index = self.index()
        digests = {}
        for entry, batch in zip(index.batches, self.batches):
            arrays = {f"input.{k}": v for k, v in batch.inputs.items()}
            arrays.update({f"output.{k}": v for k, v in batch.outputs.items()})
            write_tensors(folder / entry.file, arrays)
            digests[entry.file] = _sha256((folder / entry.file).read_bytes())
        data = index.model_dump_json(indent=1).encode()
        write_bytes(folder / INDEX_FILE, data)
        digests[INDEX_FILE] = _sha256(data)
        return digests

    def summary(self) -> str:
        source = self.provenance.get("source", "?")
        return (f"{len(self.batches)} batch(es), {self.rows} row(s) from {source}; "
                f"outputs {', '.join(self.output_names)} within rtol {self.rtol:g}")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- reading -------------------------------------------------------------------------------


def read_example_set(folder: Path, digests: dict) -> ExampleSet:
    """Read an examples folder whose files must have the sha256s in ``digests``
    (file name -> sha256); every problem is a ``SavedGraphError`` naming the file."""
    folder = Path(folder)
    if INDEX_FILE not in digests:
        raise SavedGraphError(f"{folder}: the checksum list does not name {INDEX_FILE}")
    index = _read_index(folder / INDEX_FILE, digests[INDEX_FILE])
    batches = []
    for entry in index.batches:
        path = folder / entry.file
        if entry.file not in digests:
            raise SavedGraphError(f"{path}: named in {INDEX_FILE} but has no checksum")
        arrays = _checked_tensors(path, digests[entry.file])
        batches.append(_batch_from(arrays, index, path))
    return ExampleSet(batches, index.rtol, index.provenance)


def _read_checked(path: Path, digest: str) -> bytes:
    if not path.is_file():
        raise SavedGraphError(f"{path}: missing (listed with a checksum)")
    if not path.resolve().is_relative_to(path.parent.resolve()):
        raise SavedGraphError(f"{path}: a link to a file outside its folder (refused)")
    data = path.read_bytes()
    if _sha256(data) != digest:
        raise SavedGraphError(f"{path}: checksum mismatch (the file was changed or damaged after saving)")
    return data


def _read_index(path: Path, digest: str) -> ExampleIndex:
    data = _read_checked(path, digest)
    try:
        return ExampleIndex.model_validate(json.loads(data))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SavedGraphError(f"{path}: not valid JSON ({exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SavedGraphError(f"{path}: invalid field {where!r}: {first['msg']}") from None


def _checked_tensors(path: Path, digest: str) -> dict:
    _read_checked(path, digest)
    return read_tensors(path)


def _batch_from(arrays: dict, index: ExampleIndex, path: Path) -> ExampleBatch:
    wanted = [f"input.{n}" for n in index.inputs] + [f"output.{n}" for n in index.outputs]
    missing = [k for k in wanted if k not in arrays]
    if missing:
        raise SavedGraphError(f"{path}: tensors {missing} are missing (examples.json names them)")
    return ExampleBatch({n: arrays[f"input.{n}"] for n in index.inputs},
                        {n: arrays[f"output.{n}"] for n in index.outputs})


def read_examples(directory) -> ExampleSet | None:
    """The examples of saved directory ``directory`` (checked against its manifest), or
    None when it has none."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if not manifest.examples:
        return None
    prefix = EXAMPLES_DIR + "/"
    digests = {name[len(prefix):]: digest for name, digest in manifest.examples.items()}
    return read_example_set(directory / EXAMPLES_DIR, digests)


# -- making examples -----------------------------------------------------------------------


def collect_examples(graph, ir, state: dict, examples, rtol: float | None,
                     max_batches: int = DEFAULT_MAX_BATCHES) -> ExampleSet | None:
    """The ``ExampleSet`` that ``flow.save(graph, dir, examples=...)`` stores: inputs
    from ``examples`` (None: the last calls of an inference graph, if any), outputs of
    the inference ``ir`` on them run by flowserve's own interpreter. ``graph``: what the
    graph deploys (``graph.deployable_state()``: name, class, mode, recent inputs)."""
    if rtol is not None and not 0 < rtol <= 1:
        raise ValueError(f"flow.save: tolerance must be in (0, 1], got {rtol}")
    batches, provenance = _input_batches(graph, examples, max_batches)
    if not batches:
        return None
    names = [v.name for v in ir.inputs]
    stored = []
    for i, batch in enumerate(batches):
        try:
            feeds = _feeds(batch, ir.inputs, i)
        except ValueError:
            if provenance["source"] == "last_calls":
                continue  # a call of another signature than the one saved
            raise
        outputs = run_ir(ir, feeds, state)
        stored.append(ExampleBatch(feeds, {v.name: np.asarray(outputs[v.name]) for v in ir.outputs}))
    if not stored:
        return None
    provenance.update(graph=graph.name, graph_class=graph.graph_class, inputs=names,
                      flowserve_version=flowserve.__version__,
                      created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    return ExampleSet(stored, rtol or DEFAULT_RTOL, provenance)


def _input_batches(graph, examples, max_batches: int) -> tuple[list, dict]:
    if examples is None or (isinstance(examples, str) and examples == "last"):
        recent = list(graph.recent_inputs)
        if examples == "last" and (graph.training or not recent):
            raise ValueError(f"flow.save: examples='last' needs an inference graph that has been called; "
                             f"{graph.name} is {'a training graph' if graph.training else 'not called yet'}")
        if graph.training:
            return [], {}
        batches = _newest_rows(recent[-max_batches:], LAST_CALLS_MAX_ROWS)
        return batches, {"source": "last_calls", "calls": len(batches)}
    if isinstance(examples, (Tensor, np.ndarray, tuple)):
        return [_as_tuple(examples)], {"source": "tensors", "batches": 1}
    if isinstance(examples, list):
        return [_as_tuple(b) for b in examples], {"source": "tensors", "batches": len(examples)}
    if isinstance(examples, str) or not hasattr(examples, "__iter__"):
        raise TypeError(f"flow.save: examples must be a tensor, a tuple of tensors, a list of batches, a "
                        f"DataLoader (or another iterable of batches) or 'last'; got {type(examples).__name__}")
    batches = []
    for batch in examples:
        batches.append(_as_tuple(batch))
        if len(batches) >= max_batches:
            break
    provenance = {"source": "dataloader" if isinstance(examples, DataLoader) else "iterable",
                  "batches": len(batches)}
    if isinstance(examples, DataLoader):
        provenance.update(dataset=type(examples.dataset).__name__, batch_size=examples.batch_size)
    return batches, provenance


def _newest_rows(calls: list, limit: int) -> list:
    """The last calls, oldest first, holding at most ``limit`` rows (the oldest one kept
    is cut to its last rows)."""
    kept, rows = [], 0
    for call in reversed(calls):
        n = int(call[0].shape[0]) if call and call[0].ndim else 1
        if rows + n > limit:
            if rows < limit and call and all(a.ndim for a in call):
                kept.append(tuple(a[n - (limit - rows):] for a in call))
            break
        kept.append(call)
        rows += n
    return kept[::-1]


def _as_tuple(batch) -> tuple:
    return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


def _feeds(batch: tuple, values, position: int) -> dict:
    """Input name -> array for one batch, checked against the graph's inputs."""
    if len(batch) < len(values):
        raise ValueError(f"flow.save: example batch {position} has {len(batch)} tensor(s), the graph takes "
                         f"{len(values)} input(s) ({', '.join(v.name for v in values)})")
    feeds = {}
    for v, item in zip(values, batch):
        array = np.ascontiguousarray(item.numpy() if hasattr(item, "numpy") else np.asarray(item))
        want = dtypes.from_name(v.dtype).np
        if array.dtype != want:
            if array.dtype.kind != np.dtype(want).kind:
                raise ValueError(f"flow.save: example batch {position}, input {v.name!r}: dtype {array.dtype}, "
                                 f"the graph takes {v.dtype}")
            array = array.astype(want)
        if array.ndim != len(v.shape) or tuple(array.shape[1:]) != tuple(v.shape[1:]):
            raise ValueError(f"flow.save: example batch {position}, input {v.name!r}: shape {array.shape}, "
                             f"the graph takes {tuple(v.shape)} (dim 0 may differ)")
        feeds[v.name] = array.copy()
    return feeds
