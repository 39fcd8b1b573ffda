"""Graph mode's attention fusion (``config.allow_fused_attention``, on by default): in an
inference graph that ONNX Runtime runs, every multi-head attention the core's pattern finds
(``flowserve.ir.passes.attention``) whose shapes and dtypes its ``MultiHeadAttention`` kernel
takes becomes one ``fused.MultiHeadAttention`` node, lowered to that kernel by the ONNX
backend (``flowserve.onnx_backend.lowering.graph_mode``). The pass runs on the private copy
of the IR that graph mode lowers, never on the IR a graph saves.
"""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, PassResult
from flowserve.ir.passes.attention import kernel_takes, match_fused_attention
from flowserve.ir.passes.pattern import PatternGraph


def fuse_multi_head_attention(ir: GraphIR, constants: dict) -> PassResult:
    """Graph mode: every multi-head attention of ``ir`` (an inference graph) that ONNX
    Runtime's kernel computes becomes one ``fused.MultiHeadAttention`` node. ``constants``:
    state name -> array of the constants (the attention's scale is one)."""
    g = PatternGraph(ir, constants)
    g.refresh()
    count = 0
    for node in [n for n in ir.nodes if n.op == "softmax"]:
        match = match_fused_attention(g, node)
        if match is not None and match.kind == "MultiHeadAttention" and \
                kernel_takes([g.ir.values[i] for i in match.inputs], g.ir.values[match.output], match.attrs):
            g.replace(match.nodes, match.node(node))
            count += 1
    return PassResult(ir, count > 0)
