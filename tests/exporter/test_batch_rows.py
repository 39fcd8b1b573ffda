"""The batch-in-rows rewrite before static int8 (exporter/batch_rows.py): the rewritten
model computes what the original does (onnx.reference as the oracle) at every batch
size, pixel-wise runs share one fold and one unfold, ops that look at neighbouring
pixels stay on the batch-first tensor, and a QDQ model is folded where it is quantized."""

from __future__ import annotations

import collections
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

from flowserve.exporter.batch_rows import ROWS, fold_batch_into_rows
from flowserve.exporter.precision import ExampleCalibrationReader, reduce_precision
from flowserve.onnx_backend.providers import create_session
from flowserve.format.examples import ExampleBatch, ExampleSet


def _block_model() -> onnx.ModelProto:
    """x (N,4,3,3) -> 1x1 conv -> Clip -> 3x3 depthwise -> Relu -> 1x1 conv -> + x
    -> 3x3 conv stride 3 (to 1x1) -> Relu -> depthwise 3x3 on the 1x1 map -> 1x1 conv -> y."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [w("w_expand", 8, 4, 1, 1), w("b_expand", 8), w("w_dw", 8, 1, 3, 3), w("w_project", 4, 8, 1, 1),
             w("w_down", 6, 4, 3, 3), w("w_point_dw", 6, 1, 3, 3), w("b_point_dw", 6), w("w_head", 5, 6, 1, 1),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [
        helper.make_node("Conv", ["x", "w_expand", "b_expand"], ["e"], kernel_shape=[1, 1]),
        helper.make_node("Clip", ["e", "lo", "hi"], ["e6"]),
        helper.make_node("Conv", ["e6", "w_dw"], ["d"], group=8, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d"], ["dr"]),
        helper.make_node("Identity", ["dr"], ["di"]),
        helper.make_node("Conv", ["di", "w_project"], ["p"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["x", "p"], ["r"]),
        helper.make_node("Conv", ["r", "w_down"], ["s"], kernel_shape=[3, 3], strides=[3, 3]),
        helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("Conv", ["sr", "w_point_dw", "b_point_dw"], ["q"], group=6, kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["q", "w_head"], ["y"], kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5, 1, 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_rewritten_model_computes_what_the_original_does(batch):
    model = _block_model()
    folded = fold_batch_into_rows(model, max_pixels=None)
    onnx.checker.check_model(folded, full_check=True)
    x = np.random.default_rng(batch).standard_normal((batch, 4, 3, 3)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(ReferenceEvaluator(folded).run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-5)
    session = create_session(folded, device="cpu")
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-4)


def test_pixelwise_runs_share_one_fold_and_neighbour_ops_stay_batch_first():
    folded = fold_batch_into_rows(_block_model(), max_pixels=None)
    ops = collections.Counter(n.op_type for n in folded.graph.node)
    # runs on the twin: [expand, Clip], [project, Add (x's twin made once, for expand)],
    # [centre-tap dw, head]: 3 folds in, 3 unfolds out (to the 3x3 convs and the output);
    # the Relus after the 3x3 convs stay batch-first (their input has no twin)
    assert ops["Reshape"] == 6 and ops["Transpose"] == 12
    convs = {n.output[0]: n for n in folded.graph.node if n.op_type == "Conv"}
    dw = convs["d"]  # the 3x3 depthwise conv reads the batch-first tensor, made from the twin
    assert dw.input[0] == "e6" and dict((a.name, helper.get_attribute_value(a)) for a in dw.attribute)["group"] == 8
    centre = convs["q:rows"]  # depthwise on a 1x1 map: a 1x1 depthwise conv with the centre tap
    weights = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    original = {t.name: numpy_helper.to_array(t) for t in _block_model().graph.initializer}
    np.testing.assert_array_equal(weights[centre.input[1]], original["w_point_dw"][:, :, 1:2, 1:2])
    assert "w_point_dw" not in weights  # the unused 3x3 weight is dropped


def test_only_maps_up_to_max_pixels_are_folded():
    folded = fold_batch_into_rows(_block_model())  # default 4 pixels: the 3x3 maps stay, the 1x1 tail folds
    ops = collections.Counter(n.op_type for n in folded.graph.node)
    assert ops["Reshape"] == 2
    assert [n.output[0] for n in folded.graph.node if n.op_type == "Conv"] == ["e", "d", "p", "s", "q:rows", "y:rows"]
    x = np.random.default_rng(7).standard_normal((3, 4, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(ReferenceEvaluator(folded).run(None, {"x": x})[0],
                               ReferenceEvaluator(_block_model()).run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_models_without_static_images_are_left_alone():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert [n.op_type for n in fold_batch_into_rows(model).graph.node] == ["Relu"]


def _small_map_block() -> onnx.ModelProto:
    """A MobileNetV2 block on a 2x2 map: 1x1 expand, ReLU6, 3x3 depthwise, ReLU6, 1x1
    project, residual add, 1x1 head."""
    rng = np.random.default_rng(4)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)

    inits = [w("w_expand", 16, 8, 1, 1), w("b_expand", 16), w("w_dw", 16, 1, 3, 3), w("b_dw", 16),
             w("w_project", 8, 16, 1, 1), w("b_project", 8), w("w_head", 5, 8, 1, 1), w("b_head", 5),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w_expand", "b_expand"], ["e"], kernel_shape=[1, 1]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["e6"]),
             helper.make_node("Conv", ["e6", "w_dw", "b_dw"], ["d"], group=16, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["d6", "w_project", "b_project"], ["p"], kernel_shape=[1, 1]),
             helper.make_node("Add", ["x", "p"], ["r"]),
             helper.make_node("Conv", ["r", "w_head", "b_head"], ["y"], kernel_shape=[1, 1])]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5, 2, 2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_onnx_runtime_runs_the_int8_model_on_the_folded_batch_without_transposes(tmp_path):
    """What the rewrite is for: after static int8 (reduce_precision folds before quantizing)
    ONNX Runtime's layout transform cancels the transposes of the fold, leaving one
    Reshape per fold and unfold and the NHWC transposes at the model's input and output."""
    model = _small_map_block()
    x = np.random.default_rng(5).standard_normal((16, 8, 2, 2)).astype(np.float32)
    reference = ReferenceEvaluator(model).run(None, {"x": x})[0]
    examples = ExampleSet([ExampleBatch({"x": x}, {"y": reference})], 1e-4)
    quantized = reduce_precision(model, "int8", examples)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3
    session = ort.InferenceSession(quantized.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ops = collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    # folds: x (for expand and the add), d6 (for project); unfolds: e6 (to the depthwise conv), y
    assert ops["QLinearConv"] == 4 and ops["QLinearAdd"] == 1 and ops["Reshape"] == 4
    assert ops["Transpose"] == 2, ops
    for batch in (1, 16):  # int8 error only, at either batch size
        got = session.run(None, {"x": x[:batch]})[0]
        assert np.abs(got - reference[:batch]).max() <= 0.05 * np.abs(reference).max()


def _qdq(model: onnx.ModelProto, x: np.ndarray) -> onnx.ModelProto:
    """``model`` as ONNX Runtime's static quantizer writes it (QDQ, per-channel int8 weights,
    int32 biases, uint8 activations calibrated on ``x``), not folded: the form a
    quantization-aware-trained graph exports to."""
    examples = ExampleSet([ExampleBatch({"x": x}, {})], 1e-4)
    with tempfile.TemporaryDirectory() as tmp:
        source, output = Path(tmp, "model.onnx"), Path(tmp, "qdq.onnx")
        onnx.save_model(model, str(source))
        quantize_static(str(source), str(output), ExampleCalibrationReader(examples), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load_model(str(output))


@pytest.mark.parametrize("make, max_pixels", [(_block_model, None), (_small_map_block, 4)])
def test_a_qdq_model_is_folded_where_it_is_quantized(make, max_pixels, tmp_path):
    """Folded, a QDQ model computes what it did (to one step of its output, where float32
    rounding lands on a rounding boundary), every Reshape moves uint8, and ONNX Runtime still
    fuses each quantized op into its integer kernel, the centre tap's int8 weight included."""
    model = make()
    shape = [d.dim_value or 16 for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    qdq = _qdq(model, x)
    folded = fold_batch_into_rows(qdq, max_pixels=max_pixels)
    onnx.checker.check_model(folded, full_check=True)
    typed = onnx.shape_inference.infer_shapes(folded)
    types = {v.name: v.type.tensor_type.elem_type for v in list(typed.graph.value_info) + list(typed.graph.input)}
    reshapes = [n for n in folded.graph.node if n.op_type == "Reshape"]
    assert reshapes and {types[n.input[0]] for n in reshapes} == {TensorProto.UINT8}
    assert any(n.output[0].endswith(ROWS) for n in folded.graph.node if n.op_type == "Conv")
    initializers = {t.name: t for t in folded.graph.initializer}
    step = float(numpy_helper.to_array(initializers[next(n for n in folded.graph.node
                                                         if n.output[0] == "y").input[1]]))
    plain = ort.SessionOptions()  # QuantizeLinear -> DequantizeLinear -> float op, as written
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    reference, rewritten = (ort.InferenceSession(m.SerializeToString(), plain, providers=["CPUExecutionProvider"])
                            for m in (qdq, folded))
    for batch in (1, 3):
        expected = reference.run(None, {"x": x[:batch]})[0]
        np.testing.assert_allclose(rewritten.run(None, {"x": x[:batch]})[0], expected, rtol=0, atol=step * (1 + 1e-3))
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(folded.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ops = collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    assert ops["QLinearConv"] == convs and ops["QLinearAdd"] == 1 and ops["Conv"] == ops["Add"] == 0, ops
    assert ops["DequantizeLinear"] == 1 and ops["Transpose"] == 2, ops  # the output's; the NHWC input and output
