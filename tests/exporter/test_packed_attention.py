"""int8-dynamic packs self-attention's Q, K and V projections into one ``Attention``, which
``quantize_dynamic`` makes ``QAttention``; graphs that do not match are left as they were."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from flowserve.exporter.packed_attention import pack_self_attention

D, HEADS = 8, 2


def _graph(key_source: str = "x", extra_use: bool = False, bias: bool = True, mask: bool = False) -> onnx.ModelProto:
    """``MultiHeadAttention`` over three projections of ``x`` (K and V of ``key_source``);
    ``extra_use``: Q's projection is also a graph output; ``mask``: a key padding mask."""
    rng = np.random.default_rng(0)
    weights, nodes = [], []
    for name, source in (("q", "x"), ("k", key_source), ("v", key_source)):
        weights.append(numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32), f"w_{name}"))
        nodes.append(helper.make_node("MatMul", [source, f"w_{name}"], [f"{name}_mm" if bias else name]))
        if bias:
            weights.append(numpy_helper.from_array(rng.standard_normal(D).astype(np.float32), f"b_{name}"))
            nodes.append(helper.make_node("Add", [f"{name}_mm", f"b_{name}"], [name]))
    nodes.append(helper.make_node("MultiHeadAttention", ["q", "k", "v"] + (["", "mask"] if mask else []), ["y"],
                                  domain="com.microsoft", num_heads=HEADS, scale=0.3))
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", 5, D]) for n in sorted({"x", key_source})]
    inputs += [helper.make_tensor_value_info("mask", TensorProto.INT32, ["B", 5])] if mask else []
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ["y"] + (["q"] if extra_use else [])]
    graph = helper.make_graph(nodes, "g", inputs, outputs, weights)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)  # an IR version ONNX Runtime reads


def _run(model: onnx.ModelProto, feed: dict) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], feed)[0]


def _ops(model: onnx.ModelProto) -> list:
    return sorted(n.op_type for n in model.graph.node)


def test_self_attention_becomes_one_packed_attention_with_the_same_outputs():
    for bias in (True, False):
        model = _graph(bias=bias)
        feed = {"x": np.random.default_rng(1).standard_normal((3, 5, D)).astype(np.float32)}
        expected = _run(model, feed)
        packed = pack_self_attention(onnx.load_from_string(model.SerializeToString()))
        assert _ops(packed) == ["Attention"]
        attrs = {a.name: helper.get_attribute_value(a) for a in packed.graph.node[0].attribute}
        assert attrs == {"num_heads": HEADS, "scale": np.float32(0.3)}
        assert [t.name for t in packed.graph.initializer] == ["y_qkv_weight", "y_qkv_bias"]  # unpacked ones dropped
        assert tuple(packed.graph.initializer[0].dims) == (D, 3 * D)
        np.testing.assert_allclose(_run(packed, feed), expected, rtol=1e-5, atol=1e-5)


def test_graphs_that_do_not_match_are_left_as_they_were():
    # cross-attention; Q's projection used elsewhere too; a key padding mask
    for model in (_graph(key_source="memory"), _graph(extra_use=True), _graph(mask=True)):
        before = model.SerializeToString()
        assert pack_self_attention(model).SerializeToString() == before


def test_the_int8_dynamic_transformer_runs_qattention(deployments):
    _, exports = deployments["transformer"]
    fp32 = _ops(onnx.load(str(exports["fp32"].path)))
    dynamic = _ops(onnx.load(str(exports["int8-dynamic"].path)))
    assert "MultiHeadAttention" in fp32
    assert "QAttention" in dynamic and "MultiHeadAttention" not in dynamic
    # the packed projections are one int8 product each, the others stay MatMulInteger
    assert dynamic.count("MatMulInteger") == fp32.count("FusedMatMul") - 3 * fp32.count("MultiHeadAttention") + \
        fp32.count("Gemm")
