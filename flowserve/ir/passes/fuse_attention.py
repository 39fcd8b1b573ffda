"""Graph mode's attention fusion (``config.allow_fused_attention``, on by default): in an
inference graph that ONNX Runtime runs, every multi-head attention the core's pattern finds
(``flowserve.ir.passes.attention``) whose shapes and dtypes its ``MultiHeadAttention`` kernel
takes becomes one ``fused.MultiHeadAttention`` node, lowered to that kernel by the ONNX
backend (``flowserve.onnx_backend.lowering.graph_mode``). The pass runs on the private copy
of the IR that graph mode lowers, never on the IR a graph saves.
"""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, PassResult
from flowserve.ir.passes.attention import FUSED_DTYPES, AttentionMatch, match_fused_attention
from flowserve.ir.passes.pattern import PatternGraph


def _fits_kernel(g: PatternGraph, match: AttentionMatch) -> bool:
    """ONNX Runtime's ``MultiHeadAttention``: q (n, L, E), k (n, S, E), v (n, S, Ev), one
    float dtype (float32 or float16) throughout, and a bias that broadcasts to the scores
    (n, heads, L, S) without widening them."""
    q, k, v = (g.ir.values[name] for name in match.inputs[:3])
    float_types = {g.ir.values[name].dtype for name in match.inputs + [match.output]}
    if float_types - set(FUSED_DTYPES) or len(float_types) != 1:
        return False
    if not q.shape[0] == k.shape[0] == v.shape[0] or k.shape[1] != v.shape[1] or q.shape[2] != k.shape[2]:
        return False
    if not match.attrs["has_bias"]:
        return True
    scores = (q.shape[0], match.attrs["heads"], q.shape[1], k.shape[1])
    bias = tuple(g.ir.values[match.inputs[3]].shape)
    return len(bias) <= 4 and all(b in (1, s) for b, s in zip(bias[::-1], scores[::-1]))


def fuse_multi_head_attention(ir: GraphIR, constants: dict) -> PassResult:
    """Graph mode: every multi-head attention of ``ir`` (an inference graph) that ONNX
    Runtime's kernel computes becomes one ``fused.MultiHeadAttention`` node. ``constants``:
    state name -> array of the constants (the attention's scale is one)."""
    g = PatternGraph(ir, constants)
    g.refresh()
    count = 0
    for node in [n for n in ir.nodes if n.op == "softmax"]:
        match = match_fused_attention(g, node)
        if match is not None and match.kind == "MultiHeadAttention" and _fits_kernel(g, match):
            g.replace(match.nodes, match.node(node))
            count += 1
    return PassResult(ir, count > 0)
