"""Reading a model source into an ``onnx.ModelProto``, never reading outside it.

A source is an ``.onnx`` file, a version folder holding ``model.onnx``, a saved
graph directory (``flowserve.json``, exported with the fused ONNX Runtime
target), or a version folder holding exactly one saved directory (as Triton's
``model.savedmodel/``). Nothing here executes code from the source: ONNX files
are protobuf, saved directories are JSON plus safetensors.

Every file a model is read from must resolve (symlinks followed) inside the
model's ``root``: its folder in a repository, the source itself otherwise.
External tensor data is read here, from files inside that root, and inlined:
ONNX Runtime gets a model that references no file at all, so nothing can
resolve against the server's working directory::

    proto = load_model_proto(pathlib.Path("repo/mlp/1"), root=pathlib.Path("repo/mlp"))
"""

from __future__ import annotations

import os
import pathlib
from typing import Iterator, Optional

import onnx
from onnx import TensorProto

from flowserve.errors import FlowserveError
from flowserve.format.manifest import MANIFEST, read_manifest
from flowserve.onnx_backend import providers

from .errors import ModelLoadError

ONNX_FILE = "model.onnx"
SERVE_PARITY_RTOL = 1e-4


def is_model_source(path: pathlib.Path) -> bool:
    """True for an ``.onnx`` file or a folder holding ``model.onnx``/``flowserve.json``."""
    if path.is_file():
        return path.suffix == ".onnx"
    return (path / ONNX_FILE).is_file() or (path / MANIFEST).is_file()


def nested_saved_directory(folder: pathlib.Path) -> Optional[pathlib.Path]:
    """The one saved directory inside ``folder`` (``<version>/<saved dir>/``), else None."""
    if not folder.is_dir() or is_model_source(folder):
        return None
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / MANIFEST).is_file():
        return entries[0]
    return None


def check_contained(path: pathlib.Path, root: pathlib.Path) -> pathlib.Path:
    """``path`` resolved; a ``ModelLoadError`` when it (or a link on the way) leaves ``root``."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise ModelLoadError(f"{path}: resolves to {resolved}, outside the model folder "
                             f"{root} (links out of a model folder are refused)")
    return resolved


def load_model_proto(path: pathlib.Path, root: Optional[pathlib.Path] = None,
                     provider: str = "onnxruntime") -> onnx.ModelProto:
    """The ONNX model of source ``path``; a ``ModelLoadError`` naming the file if bad.

    ``root`` (default: ``path`` itself, or the folder of the file it names) bounds every
    file read. A saved directory is exported for ``provider`` (the provider table's
    ``export_target``: OpenVINO runs no ``com.microsoft`` kernels).
    """
    root = root if root is not None else (path.resolve().parent if path.is_file() else path)
    check_contained(path, root)
    if path.is_file() and path.suffix == ".onnx":
        return load_onnx_file(path, root)
    nested = nested_saved_directory(path)
    if nested is not None:
        path = nested
    if (path / MANIFEST).is_file():
        check_contained(path, root)
        return export_saved_directory(path, providers.export_target(provider))
    if (path / ONNX_FILE).is_file():
        return load_onnx_file(path / ONNX_FILE, root)
    raise ModelLoadError(f"{path}: holds neither {ONNX_FILE}, {MANIFEST} nor one saved "
                         "directory")


def load_onnx_file(path: pathlib.Path, root: Optional[pathlib.Path] = None) -> onnx.ModelProto:
    """Parse ``path`` and inline its external data, read only from files inside ``root``."""
    root = root if root is not None else path.parent
    check_contained(path, root)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise ModelLoadError(f"{path}: not a valid ONNX model ({type(exc).__name__})") from None
    inline_external_data(model, path.parent, root, str(path))
    return model


def model_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Every tensor a model holds, wherever it sits: initializers, sparse initializers
    (values and indices), tensor and sparse-tensor attributes, in the main graph,
    every subgraph, every local function body and the training-info graphs."""
    graphs = [model.graph]
    for info in model.training_info:
        graphs += [info.initialization, info.algorithm]
    node_lists = [function.node for function in model.functions]
    while graphs or node_lists:
        if graphs:
            graph = graphs.pop()
            yield from graph.initializer
            for sparse in graph.sparse_initializer:
                yield from (sparse.values, sparse.indices)
            node_lists.append(graph.node)
            continue
        for node in node_lists.pop():
            for attribute in node.attribute:
                yield from _attribute_tensors(attribute)
                graphs.extend([attribute.g] if attribute.HasField("g") else [])
                graphs.extend(attribute.graphs)


def _attribute_tensors(attribute: onnx.AttributeProto) -> Iterator[TensorProto]:
    if attribute.HasField("t"):
        yield attribute.t
    yield from attribute.tensors
    sparse = list(attribute.sparse_tensors)
    if attribute.HasField("sparse_tensor"):
        sparse.append(attribute.sparse_tensor)
    for tensor in sparse:
        yield from (tensor.values, tensor.indices)


def uses_external_data(tensor: TensorProto) -> bool:
    """True when ``tensor`` points at a file (either marker counts)."""
    return tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data) > 0


def external_tensor_names(model: onnx.ModelProto) -> list[str]:
    """Names of the tensors that still reference external files."""
    return [t.name or "<unnamed>" for t in model_tensors(model) if uses_external_data(t)]


def inline_external_data(model: onnx.ModelProto, folder: pathlib.Path, root: pathlib.Path,
                         where: str) -> None:
    """Replace every external-data reference by the bytes it names.

    A ``location`` is relative to ``folder`` (the ONNX file's folder) and must resolve
    inside ``root``; ``offset``/``length`` must lie within the file.
    """
    for tensor in model_tensors(model):
        if not uses_external_data(tensor):
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        data = _read_external(entries, folder, root, f"{where}: tensor {tensor.name!r}")
        tensor.ClearField("external_data")
        tensor.data_location = TensorProto.DEFAULT
        tensor.raw_data = data


def _read_external(entries: dict, folder: pathlib.Path, root: pathlib.Path, where: str) -> bytes:
    location = entries.get("location", "")
    if not location or os.path.isabs(location) or "\0" in location:
        raise ModelLoadError(f"{where}: external data location {location!r} is not a "
                             "relative file name")
    target = folder / location
    resolved = target.resolve()
    if not resolved.is_relative_to(root.resolve()) or not resolved.is_file():
        raise ModelLoadError(f"{where}: external data {location!r} is outside the model "
                             "folder or missing")
    try:
        offset = int(entries.get("offset", 0))
        size = resolved.stat().st_size
        length = int(entries.get("length", size - offset))
    except ValueError:
        raise ModelLoadError(f"{where}: external data offset/length are not integers") from None
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelLoadError(f"{where}: external data range {offset}+{length} lies outside "
                             f"{location!r} ({size} bytes)")
    with open(resolved, "rb") as handle:
        handle.seek(offset)
        return handle.read(length)


def export_saved_directory(path: pathlib.Path, target: str = "onnxruntime") -> onnx.ModelProto:
    """Export a ``flow.save`` directory for ``target`` (the exporter's: ``"onnxruntime"``,
    its fused kernels, or ``"portable"``)."""
    try:
        from flowserve.exporter import export  # local: only saved directories need the exporter and the core
    except ImportError as exc:
        raise ModelLoadError(f"{path}: flowserve.exporter is unavailable ({exc})") from None
    try:
        # the parity check guards against lowering faults; deep float32 networks can differ
        # from flowserve's numpy execution by rounding alone (~1e-5 of the output scale)
        return export(path, target=target, rtol=SERVE_PARITY_RTOL).model
    except FlowserveError as exc:
        raise ModelLoadError(str(exc)) from None


def saved_graph_name(path: pathlib.Path) -> str:
    """The graph name in a saved directory's manifest (the default model name)."""
    try:
        return read_manifest(path).graph_name
    except FlowserveError as exc:
        raise ModelLoadError(str(exc)) from None
