"""Reading a model source into an ``onnx.ModelProto``, never reading outside it.

A source is an ``.onnx`` file, a version folder holding ``model.onnx``, or a
saved graph directory (``flowserve.json``), which is exported with the fused
ONNX Runtime target. Nothing here executes code from the source: ONNX files are
protobuf, saved directories are JSON plus safetensors::

    proto = load_model_proto(pathlib.Path("repo/mlp/1"))
"""

from __future__ import annotations

import pathlib

import onnx
from onnx import external_data_helper

from flowserve.errors import FlowserveError

from .errors import ModelLoadError

MANIFEST_FILE = "flowserve.json"
ONNX_FILE = "model.onnx"


def is_model_source(path: pathlib.Path) -> bool:
    """True for an ``.onnx`` file or a folder holding ``model.onnx``/``flowserve.json``."""
    if path.is_file():
        return path.suffix == ".onnx"
    return (path / ONNX_FILE).is_file() or (path / MANIFEST_FILE).is_file()


def load_model_proto(path: pathlib.Path) -> onnx.ModelProto:
    """The ONNX model of source ``path``; a ``ModelLoadError`` naming the file if bad."""
    if path.is_file() and path.suffix == ".onnx":
        return load_onnx_file(path)
    if (path / MANIFEST_FILE).is_file():
        return export_saved_directory(path)
    if (path / ONNX_FILE).is_file():
        return load_onnx_file(path / ONNX_FILE)
    raise ModelLoadError(f"{path}: holds neither {ONNX_FILE} nor {MANIFEST_FILE}")


def load_onnx_file(path: pathlib.Path) -> onnx.ModelProto:
    """Parse ``path``; external data may only come from files beside it."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise ModelLoadError(f"{path}: not a valid ONNX model ({type(exc).__name__})") from None
    if any(external_data_helper.uses_external_data(t) for t in _tensors(model)):
        _check_external_locations(model, path.parent)
        try:
            external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as exc:
            raise ModelLoadError(f"{path}: external data could not be read ({exc})") from None
    return model


def _tensors(model: onnx.ModelProto):
    """Every tensor of the model: initializers and tensor attributes, subgraphs too."""
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        yield from graph.initializer
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("t"):
                    yield attribute.t
                yield from attribute.tensors
                graphs.extend([attribute.g] if attribute.HasField("g") else [])
                graphs.extend(attribute.graphs)


def _check_external_locations(model: onnx.ModelProto, folder: pathlib.Path) -> None:
    root = folder.resolve()
    for tensor in _tensors(model):
        for entry in tensor.external_data:
            if entry.key != "location":
                continue
            target = (root / entry.value).resolve()
            if not target.is_relative_to(root) or not target.is_file():
                raise ModelLoadError(
                    f"{folder}: tensor {tensor.name!r} points at external data "
                    f"{entry.value!r} outside the model folder or missing"
                )


SERVE_PARITY_RTOL = 1e-4


def export_saved_directory(path: pathlib.Path) -> onnx.ModelProto:
    """Export a ``flow.save`` directory with the fused ONNX Runtime target."""
    try:
        from flowserve.exporter import export
    except ImportError as exc:
        raise ModelLoadError(f"{path}: flowserve.exporter is unavailable ({exc})") from None
    try:
        # the parity check guards against lowering faults; deep float32 networks can differ
        # from flowserve's numpy execution by rounding alone (~1e-5 of the output scale)
        return export(path, target="onnxruntime", rtol=SERVE_PARITY_RTOL).model
    except FlowserveError as exc:
        raise ModelLoadError(str(exc)) from None


def saved_graph_name(path: pathlib.Path) -> str:
    """The graph name in a saved directory's manifest (the default model name)."""
    try:
        from flowserve.serialization import read_manifest

        return read_manifest(path).graph_name
    except FlowserveError as exc:
        raise ModelLoadError(str(exc)) from None
