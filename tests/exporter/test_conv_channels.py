"""An int8 convolution on 3 input channels is padded to 4 (exporter/conv_channels.py): the
same outputs, bit for bit, still fused by ONNX Runtime into QLinearConv; convolutions the
rewrite must not touch are left as they are."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowserve.exporter.conv_channels import pad_input_channels
from flowserve.onnx_backend.versions import DEFAULT_OPSET, ir_version


def qdq_conv_model(channels=3, outputs=16, group=1, weight_zero_point=0, float_weight=False, extra_reader=False):
    """x -> QuantizeLinear -> DequantizeLinear -> Conv (int8 per-channel weight, int32 bias)
    -> QuantizeLinear -> DequantizeLinear -> y, as the int8 exports write it."""
    rng = np.random.default_rng(0)
    weight = rng.integers(-64, 65, (outputs, channels // group, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(0.01, 0.02, outputs).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(120, np.uint8), "x_zero_point"),
        numpy_helper.from_array(np.array(0.1, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(7, np.uint8), "y_zero_point"),
        numpy_helper.from_array(weight, "w_q"),
        numpy_helper.from_array(w_scale, "w_scale"),
        numpy_helper.from_array(np.full(outputs, weight_zero_point, np.int8), "w_zero_point"),
        numpy_helper.from_array(rng.integers(-500, 500, outputs).astype(np.int32), "b_q"),
        numpy_helper.from_array((0.05 * w_scale).astype(np.float32), "b_scale"),
        numpy_helper.from_array(np.zeros(outputs, np.int32), "b_zero_point"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero_point"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero_point"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zero_point"], ["b"], axis=0),
        helper.make_node("Conv", ["x_dq", "w", "b"], ["conv"], pads=[1, 1, 1, 1], strides=[2, 2], group=group,
                         name="stem"),
        helper.make_node("QuantizeLinear", ["conv", "y_scale", "y_zero_point"], ["y_q"]),
        helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero_point"], ["y"]),
    ]
    if float_weight:
        inits.append(numpy_helper.from_array(weight.astype(np.float32) * w_scale[:, None, None, None], "w"))
    else:
        nodes.insert(2, helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero_point"], ["w"], axis=0))
    outputs_ = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", outputs, 8, 8])]
    if extra_reader:  # the dequantized input is read by something else too
        nodes.append(helper.make_node("Relu", ["x_dq"], ["x_relu"]))
        outputs_.append(helper.make_tensor_value_info("x_relu", TensorProto.FLOAT, ["N", channels, 16, 16]))
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                ["N", channels, 16, 16])],
                              outputs_, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", DEFAULT_OPSET)])
    model.ir_version = ir_version(DEFAULT_OPSET)
    return model


def run(model: onnx.ModelProto, x: np.ndarray, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL) -> list:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def optimised_ops(model: onnx.ModelProto, path) -> collections.Counter:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return collections.Counter(n.op_type for n in onnx.load(path).graph.node)


def test_three_channel_conv_is_padded_to_four_with_the_same_outputs(tmp_path):
    model = qdq_conv_model()
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32) * 3
    before = run(model, x)
    padded = pad_input_channels(qdq_conv_model())
    onnx.checker.check_model(padded, full_check=True)
    weights = {t.name: t for t in padded.graph.initializer}
    assert list(weights["w_q:padded"].dims) == [16, 4, 3, 3] and "w_q" not in weights
    assert not numpy_helper.to_array(weights["w_q:padded"])[:, 3].any()
    assert [n.op_type for n in padded.graph.node].count("Pad") == 1
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        np.testing.assert_array_equal(run(padded, x, level)[0], before[0])
    ops = optimised_ops(padded, tmp_path / "optimised.onnx")
    assert ops["QLinearConv"] == 1 and ops["Conv"] == 0


def test_a_dequantized_input_read_elsewhere_is_kept(tmp_path):
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    before = run(qdq_conv_model(extra_reader=True), x)
    padded = pad_input_channels(qdq_conv_model(extra_reader=True))
    assert "x_dq" in {o for n in padded.graph.node for o in n.output}
    for got, want in zip(run(padded, x), before):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kwargs", [
    {"channels": 4},  # already a multiple of 4
    {"outputs": 8},  # too few output channels for the symmetric kernel: padding would gain nothing
    {"outputs": 20},  # output channels not a multiple of 8: same
    {"channels": 6, "group": 2},  # grouped
    {"weight_zero_point": 1},  # asymmetric weights take the other kernel
    {"float_weight": True},  # a float layer
], ids=["aligned", "8-outputs", "20-outputs", "grouped", "asymmetric", "float"])
def test_convolutions_the_symmetric_kernel_does_not_take_are_left_alone(kwargs):
    model = qdq_conv_model(**kwargs)
    assert pad_input_channels(qdq_conv_model(**kwargs)) == model
