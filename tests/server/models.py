"""Small ONNX models the serving tests build with ``onnx.helper``.

IR version 10 / opset 21: ONNX Runtime 1.31 refuses the IR 14 that onnx 1.23
writes by default.
"""

from __future__ import annotations

import json
import pathlib

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION, OPSET = 10, 21

# protocol datatype -> (ONNX element type, numpy dtype)
ALL_DATATYPES = {
    "BOOL": (TensorProto.BOOL, np.bool_),
    "UINT8": (TensorProto.UINT8, np.uint8),
    "UINT16": (TensorProto.UINT16, np.uint16),
    "UINT32": (TensorProto.UINT32, np.uint32),
    "UINT64": (TensorProto.UINT64, np.uint64),
    "INT8": (TensorProto.INT8, np.int8),
    "INT16": (TensorProto.INT16, np.int16),
    "INT32": (TensorProto.INT32, np.int32),
    "INT64": (TensorProto.INT64, np.int64),
    "FP16": (TensorProto.FLOAT16, np.float16),
    "FP32": (TensorProto.FLOAT, np.float32),
    "FP64": (TensorProto.DOUBLE, np.float64),
    "BF16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
    "BYTES": (TensorProto.STRING, object),
}


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    return model


def mlp(sizes=(4, 8, 3), seed: int = 0) -> onnx.ModelProto:
    """Gemm/Relu MLP with a dynamic batch: input ``x``, output ``y``."""
    rng = np.random.default_rng(seed)
    nodes, initializers, previous = [], [], "x"
    layers = list(zip(sizes[:-1], sizes[1:]))
    for index, (fan_in, fan_out) in enumerate(layers):
        weight = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        bias = rng.standard_normal(fan_out).astype(np.float32)
        initializers += [numpy_helper.from_array(weight, f"w{index}"),
                         numpy_helper.from_array(bias, f"b{index}")]
        out = "y" if index == len(layers) - 1 else f"h{index}"
        nodes.append(helper.make_node("Gemm", [previous, f"w{index}", f"b{index}"], [out]))
        if out != "y":
            nodes.append(helper.make_node("Relu", [out], [f"{out}_relu"]))
            out = f"{out}_relu"
        previous = out
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", sizes[-1]])],
        initializers,
    )


def mlp_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """numpy evaluation of ``mlp()``'s graph, float64 accumulate."""
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    h = x.astype(np.float64)
    count = len([n for n in model.graph.node if n.op_type == "Gemm"])
    for index in range(count):
        h = h @ weights[f"w{index}"] + weights[f"b{index}"]
        if index < count - 1:
            h = np.maximum(h, 0)
    return h


def identity_all_types() -> onnx.ModelProto:
    """``out_T = Identity(in_T)`` for every protocol datatype T, shape [batch, 3]."""
    nodes, inputs, outputs = [], [], []
    for datatype, (element, _) in ALL_DATATYPES.items():
        nodes.append(helper.make_node("Identity", [f"in_{datatype}"], [f"out_{datatype}"]))
        inputs.append(helper.make_tensor_value_info(f"in_{datatype}", element, ["batch", 3]))
        outputs.append(helper.make_tensor_value_info(f"out_{datatype}", element, ["batch", 3]))
    return _model(nodes, inputs, outputs)


def sample(datatype: str, rows: int = 2, seed: int = 0) -> np.ndarray:
    """A [rows, 3] array of ``datatype`` with varied values."""
    rng = np.random.default_rng(seed)
    dtype = ALL_DATATYPES[datatype][1]
    if datatype == "BYTES":
        array = np.empty((rows, 3), dtype=object)
        array[:] = [[f"s{i}-{j}-é".encode() for j in range(3)] for i in range(rows)]
        return array
    if datatype == "BOOL":
        return rng.integers(0, 2, (rows, 3)).astype(np.bool_)
    if datatype in ("FP16", "FP32", "FP64", "BF16"):
        return rng.standard_normal((rows, 3)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), (rows, 3)).astype(dtype)


def write_repository(root: pathlib.Path) -> pathlib.Path:
    """A repository: ``mlp`` (versions 1, 2; config), ``types``, and a ``broken`` model."""
    for version, seed in (("1", 1), ("2", 2)):
        (root / "mlp" / version).mkdir(parents=True)
        onnx.save(mlp((4, 8, 3), seed), root / "mlp" / version / "model.onnx")
    (root / "mlp" / "config.json").write_text(json.dumps({
        "max_batch_size": 16,
        "dynamic_batching": {"max_queue_delay_us": 200},
        "version_policy": {"policy": "all"},
    }))
    (root / "types" / "1").mkdir(parents=True)
    onnx.save(identity_all_types(), root / "types" / "1" / "model.onnx")
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "model.onnx").write_bytes(b"this is not a protobuf")
    return root
