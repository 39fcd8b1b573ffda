import numpy as np

import flowserve as flow
import flowserve.nn as nn
from flowserve.ops.attention import scaled_dot_product_attention
from tests.exporter.passes.common import exported_ops, passes_of, traced


class SDPA(nn.Module):
    def forward(self, x):
        return scaled_dot_product_attention(x, x * 2.0, x + 1.0)


def test_scaled_dot_product_attention_is_one_node():
    g = passes_of(traced(SDPA(), 2, 3, 5, 8))
    fused = [n for n in g.ir.nodes if n.op == "fused.Attention"]
    assert len(fused) == 1 and abs(fused[0].attrs["scale"] - 8 ** -0.5) < 1e-7


class MHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def test_multi_head_attention_spans_the_head_split():
    g = passes_of(traced(MHA(), 2, 5, 8))
    (mha,) = [n for n in g.ir.nodes if n.op == "fused.MultiHeadAttention"]
    assert mha.attrs["heads"] == 2 and all(len(g.ir.values[i].shape) == 3 for i in mha.inputs)
    assert "com.microsoft.MultiHeadAttention" in exported_ops(traced(MHA(), 2, 5, 8), "onnxruntime")
    assert "flowserve.MultiHeadAttention_h2_s0p5" in exported_ops(traced(MHA(), 2, 5, 8), "portable")


class MaskedMHA(nn.Module):
    """Self-attention with a causal mask (a constant of the trace)."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        causal = flow.tensor(np.triu(np.ones((x.shape[1], x.shape[1]), dtype=bool), 1))
        return self.attn(x, x, x, attn_mask=causal, need_weights=False)[0]


def test_masked_multi_head_attention_is_one_kernel_with_its_bias():
    g = passes_of(traced(MaskedMHA(), 2, 5, 8))
    (mha,) = [n for n in g.ir.nodes if n.op == "fused.MultiHeadAttention"]
    assert mha.attrs["has_bias"] and len(mha.inputs) == 4
    assert "com.microsoft.MultiHeadAttention" in exported_ops(traced(MaskedMHA(), 2, 5, 8), "onnxruntime")
    assert "flowserve.MultiHeadAttention_h2_s0p5_bias" in exported_ops(traced(MaskedMHA(), 2, 5, 8), "portable")
