"""Reference examples of a saved graph: real input batches and the graph's outputs on them.

``flow.save(graph, dir, examples=...)`` stores them in ``dir/examples/``: one safetensors
file per batch (``input.<name>`` and ``output.<name>`` tensors) and ``examples.json``,
which says how they were made (provenance), the tolerance the outputs must be
reproduced within, and which batch files there are. The manifest lists every file with
its sha256, so a changed example is refused like a changed weight. Export proves each
model it writes on these examples, and the server verifies its sessions on them before
it reports ready.

This module reads and writes the folder (it imports no tensor, op or ``nn`` module, so
the server reads examples without them); ``flowserve.serialization.example_batches`` makes the
examples a save stores.

>>> flow.save(graph, "mlp_dir", examples=loader)          # doctest: +SKIP
>>> read_examples("mlp_dir").rows                          # doctest: +SKIP
32
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flowserve.errors import SavedGraphError
from flowserve.format.manifest import EXAMPLES_DIR, FILE_NAME, read_manifest
from flowserve.format.tensors import read_tensors, write_bytes, write_tensors

INDEX_FILE = "examples.json"
DEFAULT_RTOL = 1e-4  # float32 networks differ between runtimes by rounding, ~1e-5 of the output scale


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
