"""Writing and checking exported models, with external data for models over 2 GB."""

from __future__ import annotations

from pathlib import Path

import onnx

from flowserve.errors import ExportError
from flowserve.onnx_backend.providers import create_session

PROTOBUF_LIMIT = 2**31 - 1  # bytes a single serialized ModelProto may hold
EXTERNAL_DATA_THRESHOLD = PROTOBUF_LIMIT  # models larger than this keep weights in a side file


def needs_external_data(model: onnx.ModelProto) -> bool:
    """Whether the model is over the threshold (its initializers alone decide, cheaply)."""
    size = sum(len(t.raw_data) for t in model.graph.initializer)
    return size > EXTERNAL_DATA_THRESHOLD or (size > EXTERNAL_DATA_THRESHOLD // 2
                                               and model.ByteSize() > EXTERNAL_DATA_THRESHOLD)


def write_model(model: onnx.ModelProto, path: Path) -> str | None:
    """Write ``model`` to ``path``; a model over the threshold keeps its initializers in
    ``<name>.data`` beside it. Returns that file's name, or None."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not needs_external_data(model):
        onnx.save_model(model, str(path))
        return None
    location = path.name + ".data"
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=1024)
    return location


def check_model(model: onnx.ModelProto, path: Path | None) -> onnx.ModelProto:
    """``onnx.checker`` (full check) and shape inference; a large model is checked from
    its file. Returns the model with inferred value shapes."""
    large = needs_external_data(model)
    if large and path is None:
        raise ExportError(f"the model is {model.ByteSize() / 2**30:.1f} GiB, over protobuf's 2 GiB: "
                          "give an output path so that its weights go to an external data file")
    try:
        if large:
            onnx.checker.check_model(str(path), full_check=True)
            return model
        onnx.checker.check_model(model, full_check=True)
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"the exported model fails onnx.checker: {first}") from None


def session_for(model: onnx.ModelProto, path: Path | None):
    source = str(path) if path is not None and needs_external_data(model) else model
    return create_session(source, device="cpu")
