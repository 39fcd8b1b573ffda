"""A QAT graph saved with its learned scales exports to int8 without calibration, the int8
model gives the QAT graph's eval outputs within one quantization step, and ONNX Runtime's
fused integer kernels compute each QDQ node of a MobileNetV2 within one step."""

from __future__ import annotations

import collections
import json
import shutil

import numpy as np
import onnx
import onnx.inliner
import onnx.utils
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import flowserve as flow
from flowserve.errors import SavedGraphError
from flowserve.exporter import export
from flowserve.exporter.batch_rows import ROWS
from flowserve.exporter.precision import reduce_precision
from flowserve.onnx_backend.providers import create_session
from flowserve.onnx_backend.runtime import session_options
from flowserve.exporter.verified import export_verified
from flowserve.format.manifest import read_manifest
from flowserve.format.tensors import read_tensors
from tests.ao.qat_models import TinyNet, images, labels
from tests.ao.test_qat_graph import TrainGraph


class EvalGraph(flow.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A QAT training graph after four steps, saved with held-out examples."""
    model = TinyNet()
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), {})
    for step in range(4):
        graph(images(seed=step), labels(seed=10 + step))
    folder = tmp_path_factory.mktemp("qat") / "tiny"
    flow.save(graph, folder, examples=[images(seed=100 + i) for i in range(3)])
    return model, folder


def test_saved_directory_records_the_learned_scales(trained):
    model, folder = trained
    record = read_manifest(folder).quantization
    params = read_tensors(folder / "params.safetensors")
    assert record is not None and len(record.tensors) >= 7
    weights = [t for t in record.tensors if t.axis is not None]
    assert weights and all((t.quant_min, t.quant_max) == (-64, 64) for t in weights)
    state = model.state_dict()
    for t in record.tensors:
        name = t.scale.split(".", 1)[1]  # graph attribute "model." + the module's state_dict key
        np.testing.assert_array_equal(params[t.scale], state[name].numpy())


def test_int8_export_needs_no_calibration_and_matches_the_qat_graph(trained, tmp_path):
    model, folder = trained
    result = export_verified(folder, tmp_path / "tiny.int8.onnx", precision="int8")
    assert result.proof.passed and result.path.is_file()
    ops = collections.Counter(n.op_type for n in result.model.graph.node)
    assert ops["QuantizeLinear"] >= 5 and ops["DequantizeLinear"] > ops["QuantizeLinear"]
    weights = [t for t in result.model.graph.initializer if "_quantized" in t.name]
    assert len(weights) == 4 and all(t.data_type == onnx.TensorProto.INT8 for t in weights)  # 3 convs, 1 linear
    session = create_session(result.model, device="cpu")
    model.eval()
    x = images(batch=16, seed=200)
    expected = EvalGraph(model)(x).numpy()
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    step = float(model.head.output_fake_quant.scale[0])
    np.testing.assert_allclose(got, expected, rtol=0, atol=step * (1 + 1e-3))


def test_reduce_precision_of_a_qdq_model_takes_no_calibration(trained):
    _, folder = trained
    model = export(folder, None, check=False).model
    quantized = reduce_precision(onnx.inliner.inline_local_functions(model), "int8", None)
    assert any(n.op_type == "DequantizeLinear" and n.input[0].endswith("_int32") for n in quantized.graph.node)


def test_a_record_naming_a_missing_tensor_is_refused(trained, tmp_path):
    _, folder = trained
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / "flowserve.json").read_text())
    manifest["quantization"]["tensors"][0]["scale"] = "model.nothing.scale"
    (copy / "flowserve.json").write_text(json.dumps(manifest))
    with pytest.raises(SavedGraphError, match="model.nothing.scale"):
        flow.load(copy)


@pytest.fixture(scope="module")
def mobilenet_int8(tmp_path_factory):
    """A small MobileNetV2 after two QAT steps, exported to int8 (forced: the proof's top-1
    agreement on so short a training is not what these tests are about)."""
    flow.manual_seed(0)
    model = flow.models.mobilenet_v2(num_classes=4, width_mult=0.25)
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), {})
    for step in range(2):
        graph(images(batch=8, size=32, seed=step), labels(batch=8, classes=4, seed=10 + step))
    folder = tmp_path_factory.mktemp("qat") / "mobilenet"
    flow.save(graph, folder, examples=[images(batch=4, size=32, seed=100)])
    result = export_verified(folder, None, precision="int8", force=True)
    return onnx.shape_inference.infer_shapes(result.model)


def _session(model: onnx.ModelProto, level) -> ort.InferenceSession:
    """flowserve's CPU session of ``model`` (the proof's), at ``level`` where one is given."""
    options = session_options(threads=1)
    if level is not None:
        options.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _quantized_ops(model: onnx.ModelProto):
    """(the op's float inputs before their QuantizeLinear, its DequantizeLinear output, that
    output's step) for each op between QDQ pairs, as ONNX Runtime fuses them."""
    producers = {o: n for n in model.graph.node for o in n.output}
    constants = {t.name for t in model.graph.initializer}
    inputs = {i.name for i in model.graph.input}

    def qdq(name):  # the Q -> DQ pair that makes ``name``, or None
        dq = producers.get(name)
        q = producers.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        return (q, dq) if q is not None and q.op_type == "QuantizeLinear" else None

    for node in model.graph.node:
        pair = qdq(node.output[0]) if node.op_type == "DequantizeLinear" else None
        if pair is None or pair[0].input[0] not in producers:
            continue
        starts, stack, seen = [], [producers[pair[0].input[0]]], set()
        while stack:  # back through the op (and the Clip/Identity after it) to quantized inputs
            for name in stack.pop().input:
                before = qdq(name)
                if before is not None:
                    starts.append(before[0].input[0])
                elif name in inputs:
                    starts.append(name)
                elif name and name not in constants and name in producers and name not in seen:
                    seen.add(name)
                    stack.append(producers[name])
        step = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == node.input[1]))
        yield list(dict.fromkeys(starts)), node.output[0], float(step)


def test_onnx_runtime_integer_kernels_compute_each_qdq_node_of_mobilenet(mobilenet_int8):
    """The default (optimised) session fuses the QDQ MobileNetV2 into QLinearConv, QLinearAdd
    and QGemm, and each fused kernel, fed the unoptimised session's inputs, gives the
    unoptimised DequantizeLinear -> op -> QuantizeLinear outputs within one step: the integer
    kernels sum exactly where the reference sums in float32, so a value within float32
    rounding of a rounding boundary may land on the neighbouring step (docs/export.md: the
    whole model's larger differences are such flips, amplified by the layers after them)."""
    model = mobilenet_int8
    infos = {v.name: v for v in model.graph.value_info}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(infos[n] for node in model.graph.node for n in node.output if n in infos)
    x = images(batch=4, size=32, seed=300).numpy()
    reference = _session(probe, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    values = dict(zip([o.name for o in probe.graph.output], reference.run(None, {model.graph.input[0].name: x})))
    values[model.graph.input[0].name] = x
    extractor = onnx.utils.Extractor(model)
    checked = set()
    for starts, output, step in _quantized_ops(model):
        part = extractor.extract_model(starts, [output])
        feed = {name: values[name] for name in starts}
        want = _session(part, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feed)[0]
        fused = _session(part, None)
        got = fused.run(None, feed)[0]
        steps = np.abs(got.astype(np.float64) - want) / step
        assert steps.max() <= 1 + 1e-3, f"{output}: {steps.max():.1f} steps"
        assert np.mean(steps > 0.5) <= 0.01, f"{output}: {np.mean(steps > 0.5):.3%} of the elements off by a step"
        checked.update(n.name for n in part.graph.node if n.op_type in ("Conv", "Add", "Gemm"))
    ops = [n for n in model.graph.node if n.op_type in ("Conv", "Add", "Gemm")]
    assert {n.name for n in ops} <= checked and len(ops) == 52 + 11 + 1  # convs, residual sums (11 at width 0.25), head


def onnx_runtime_optimised_ops(model: onnx.ModelProto, path) -> collections.Counter:
    """The op counts of ``model`` after ONNX Runtime's own optimisation (its QDQ fusions),
    written to ``path``."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return collections.Counter(n.op_type for n in onnx.load(path).graph.node)


def test_onnx_runtime_fuses_the_qat_mobilenet_into_integer_kernels(mobilenet_int8, tmp_path):
    ops = onnx_runtime_optimised_ops(mobilenet_int8, tmp_path / "optimised.onnx")
    assert ops["QLinearConv"] == 52 and ops["QLinearAdd"] == 11 and ops["QGemm"] == 1
    assert ops["Conv"] == ops["Add"] == ops["Gemm"] == 0
    # the convolutions on the 2x2 and 1x1 maps run on the batch laid out as one image
    # (exporter/batch_rows.py), each reading a DequantizeLinear of the uint8 twin
    producers = {o: n for n in mobilenet_int8.graph.node for o in n.output}
    on_rows = [n for n in mobilenet_int8.graph.node if n.op_type == "Conv" and n.output[0].endswith(ROWS)]
    assert len(on_rows) >= 20 and all(producers[n.input[0]].op_type == "DequantizeLinear" for n in on_rows)
    assert ops["Reshape"] > 1


@pytest.mark.parametrize("float_parts", [("stem",), ("stem", "head")], ids=["stem", "stem-and-head"])
def test_layers_left_float_export_as_float_beside_integer_kernels(tmp_path, float_parts):
    """``qconfig = None`` on the stem (and the head): the int8 export keeps their convolution
    and linear layer float32 (weight and all), quantizes the block's input after the stem,
    and still gives the QAT graph's eval outputs within one quantization step (of the
    outputs, or, with the head float, of the block's output carried through the head)."""
    model = TinyNet()
    for name in float_parts:
        getattr(model, name).qconfig = None
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), {})
    for step in range(4):
        graph(images(seed=step), labels(seed=10 + step))
    folder = tmp_path / "tiny"
    flow.save(graph, folder, examples=[images(seed=100 + i) for i in range(3)])
    result = export_verified(folder, tmp_path / "tiny.int8.onnx", precision="int8")
    assert result.proof.passed
    weights = {t.name: t.data_type for t in result.model.graph.initializer}
    quantized = 2 if "head" in float_parts else 3  # the block's two convolutions (and the head)
    assert sorted(t for n, t in weights.items() if "_quantized" in n) == [onnx.TensorProto.INT8] * quantized
    float_weight = [n for n in result.model.graph.node
                    if n.op_type in ("Conv", "Gemm", "MatMul") and weights.get(n.input[1]) == onnx.TensorProto.FLOAT]
    assert [n.op_type for n in float_weight][0] == "Conv" and len(float_weight) == len(float_parts)
    assert float_weight[0].input[0] == result.model.graph.input[0].name
    session = create_session(result.model, device="cpu")
    ops = onnx_runtime_optimised_ops(result.model, tmp_path / "optimised.onnx")
    assert ops["QLinearConv"] == 2 and ops["QGemm"] == (0 if "head" in float_parts else 1)
    model.eval()
    x = images(batch=16, seed=200)
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    if "head" in float_parts:  # one step of the pooled block output, through the float head
        step = float(model.block.activation_post_process.scale[0]) * float(np.abs(model.head.weight.numpy()).sum(1).max())
    else:
        step = float(model.head.output_fake_quant.scale[0])
    np.testing.assert_allclose(got, EvalGraph(model)(x).numpy(), rtol=0, atol=step * (1 + 1e-3))
