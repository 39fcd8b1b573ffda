"""Inference graphs on ONNX Runtime run multi-head attention as its fused kernel
(``config.allow_fused_attention``): the same numbers as eager mode (and PyTorch), with and
without masks, at batch 1 and 32; the standard operators where the switch is off, where
the graph trains, where the attention weights are returned, and for OpenVINO."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.ir.graph import Value
from flowserve.ir.passes.attention import kernel_takes
from flowserve.nn.graph.passes import lowering_ir

D_MODEL, HEADS, LENGTH = 16, 4, 6
ATOL = 2e-5


def encoder(seed: int = 0, batch_first: bool = True) -> nn.Module:
    flow.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, 32, dropout=0.1, batch_first=batch_first)
    model = nn.TransformerEncoder(layer, 2)
    model.eval()
    return model


class EncoderGraph(nn.Graph):
    """The encoder on ``x``, with the mask arguments given as graph inputs."""

    def __init__(self, model, fused: bool = True, **mask_kinds):
        super().__init__()
        self.model = model
        self.mask_kinds = mask_kinds
        self.config.allow_fused_attention(fused)
        self.config.set_execution_provider("cpu")

    def build(self, x, *masks):
        return self.model(x, **dict(zip(self.mask_kinds, masks)))


def onnx_ops(graph) -> list:
    return [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in graph._compiled.model.graph.node]


def tokens(batch: int, seed: int = 1, batch_first: bool = True):
    x = np.random.default_rng(seed).standard_normal((batch, LENGTH, D_MODEL)).astype(np.float32)
    return flow.tensor(x if batch_first else x.transpose(1, 0, 2).copy())


def masks(kind: str, batch: int) -> dict:
    rng = np.random.default_rng(2)
    if kind == "none":
        return {}
    if kind == "key_padding":
        pad = np.zeros((batch, LENGTH), dtype=bool)
        pad[0, 4:] = True
        return {"src_key_padding_mask": flow.tensor(pad)}
    if kind == "causal":
        return {"mask": flow.tensor(np.triu(np.ones((LENGTH, LENGTH), dtype=bool), 1))}
    if kind == "float":
        return {"mask": flow.tensor(rng.standard_normal((LENGTH, LENGTH)).astype(np.float32))}
    if kind == "per_head":
        return {"mask": flow.tensor(rng.standard_normal((batch * HEADS, LENGTH, LENGTH)).astype(np.float32))}
    pad = np.zeros((batch, LENGTH), dtype=bool)
    pad[-1, 5:] = True
    return {"mask": flow.tensor(np.triu(np.ones((LENGTH, LENGTH), dtype=bool), 1)),
            "src_key_padding_mask": flow.tensor(pad)}


def eager(model, x, **kw):
    with flow.no_grad():
        return model(x, **kw).numpy()


@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("kind", ["none", "key_padding", "causal", "float", "per_head", "causal_and_padding"])
def test_fused_attention_gives_eager_numbers(kind, batch):
    model, x, kw = encoder(), tokens(batch), masks(kind, batch)
    graph = EncoderGraph(model, **kw)
    out = graph(x, *kw.values()).numpy()
    np.testing.assert_allclose(out, eager(model, x, **kw), atol=ATOL, rtol=1e-5)
    ops = onnx_ops(graph)
    assert ops.count("com.microsoft.MultiHeadAttention") == 2 and "Softmax" not in ops


def test_switch_off_keeps_the_standard_operators():
    model, x, kw = encoder(), tokens(4), masks("key_padding", 4)
    fused, plain = EncoderGraph(model, **kw), EncoderGraph(model, fused=False, **kw)
    np.testing.assert_allclose(fused(x, *kw.values()).numpy(), plain(x, *kw.values()).numpy(), atol=ATOL)
    assert "com.microsoft.MultiHeadAttention" not in onnx_ops(plain) and onnx_ops(plain).count("Softmax") == 2


@pytest.mark.parametrize("batch_first", [True, False])
def test_layouts_and_a_new_batch_size(batch_first):
    model = encoder(batch_first=batch_first)
    graph = EncoderGraph(model)
    for batch in (3, 5) if batch_first else (3,):  # batch first: the second size reuses the dynamic batch
        x = tokens(batch, batch_first=batch_first)
        np.testing.assert_allclose(graph(x).numpy(), eager(model, x), atol=ATOL, rtol=1e-5)
    assert onnx_ops(graph).count("com.microsoft.MultiHeadAttention") == 2


class AttentionWeights(nn.Module):
    def __init__(self):
        super().__init__()
        flow.manual_seed(0)
        self.attn = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)

    def forward(self, x):
        out, weights = self.attn(x, x, x)
        return out, weights


def test_returned_attention_weights_keep_the_softmax():
    model = AttentionWeights().eval()
    graph = EncoderGraph(model)
    x = tokens(2)
    out, weights = graph(x)
    with flow.no_grad():
        ref_out, ref_weights = model(x)
    np.testing.assert_allclose(out.numpy(), ref_out.numpy(), atol=ATOL)
    np.testing.assert_allclose(weights.numpy(), ref_weights.numpy(), atol=ATOL)
    assert "com.microsoft.MultiHeadAttention" not in onnx_ops(graph)


def test_training_graph_keeps_the_standard_operators():
    model = encoder()
    model.train()
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1)

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer)

        def build(self, x):
            loss = self.model(x).square().mean()
            loss.backward()
            return loss

    graph = Train()
    graph(tokens(2))
    assert "com.microsoft.MultiHeadAttention" not in onnx_ops(graph)


def test_openvino_and_training_lowerings_are_not_fused():
    graph = EncoderGraph(encoder())
    graph(tokens(2))
    traced = graph._compiled.traced
    fused, modified = lowering_ir(traced.ir, {"execution_provider": "cpu"}, constants=traced.constants)
    assert modified and sum(n.op == "fused.MultiHeadAttention" for n in fused.nodes) == 2
    assert not any(n.op.startswith("fused.") for n in traced.ir.nodes)  # the traced IR is left as it was
    for options, training in (({"execution_provider": "openvino"}, False), ({"execution_provider": "cpu"}, True),
                              ({"execution_provider": "cpu", "fused_attention": False}, False)):
        assert not lowering_ir(traced.ir, options, training=training, constants=traced.constants).modified


def test_saved_graph_loads_with_the_same_outputs(tmp_path):
    model, x, kw = encoder(), tokens(3), masks("causal_and_padding", 3)
    graph = EncoderGraph(model, **kw)
    out = graph(x, *kw.values()).numpy()
    flow.save(graph, tmp_path / "encoder")
    loaded = flow.load(tmp_path / "encoder")
    np.testing.assert_allclose(loaded(x, *kw.values()).numpy(), out, atol=1e-6)


def test_float16_attention_is_fused():
    model = encoder().half()
    x = flow.tensor(tokens(2).numpy().astype(np.float16))
    graph = EncoderGraph(model)
    np.testing.assert_allclose(graph(x).numpy().astype(np.float32), eager(model, x).astype(np.float32),
                               atol=2e-2, rtol=2e-2)
    assert onnx_ops(graph).count("com.microsoft.MultiHeadAttention") == 2


def test_matches_pytorch_with_masks():
    torch = pytest.importorskip("torch")
    t_model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, 32, batch_first=True),
                                          2, enable_nested_tensor=False).eval()
    model = encoder()
    model.load_state_dict({k: flow.tensor(v.detach().numpy()) for k, v in t_model.state_dict().items()})
    x, kw = tokens(4), masks("causal_and_padding", 4)
    out = EncoderGraph(model, **kw)(x, *kw.values()).numpy()
    with torch.no_grad():
        ref = t_model(torch.tensor(x.numpy()), **{k: torch.tensor(v.numpy()) for k, v in kw.items()}).numpy()
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)


def test_kernel_takes_what_onnx_runtime_computes():
    def values(*shapes, dtype="float32"):
        return [Value(f"v{i}", shape, dtype) for i, shape in enumerate(shapes)]

    q, out = (2, 5, 8), Value("out", (2, 5, 8), "float32")
    attrs = {"has_bias": True, "heads": 2}
    for bias in [(1, 1, 5, 7), (2, 2, 5, 7), (2, 1, 1, 7), (5, 7), (7,)]:
        assert kernel_takes(values(q, (2, 7, 8), (2, 7, 8), bias), out, attrs), bias
    for bias in [(3, 1, 5, 7), (1, 4, 5, 7), (1, 1, 2, 5, 7)]:  # would widen the scores (2, 2, 5, 7)
        assert not kernel_takes(values(q, (2, 7, 8), (2, 7, 8), bias), out, attrs), bias
    assert not kernel_takes(values(q, (2, 7, 8), (2, 6, 8)), out, {"has_bias": False, "heads": 2})
    assert not kernel_takes(values(q, (2, 7, 8), (2, 7, 8), dtype="float64"), Value("out", q, "float64"),
                            {"has_bias": False, "heads": 2})
