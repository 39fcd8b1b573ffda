"""Scaled-dot-product attention -> ``fused.Attention``; with the head split and merge
around it -> ``fused.MultiHeadAttention``.

The pattern is the core's (``flowserve.ir.passes.attention``, which graph mode fuses
too); this pass records each match as a fused group of the export report.
"""

from __future__ import annotations

from flowserve.exporter.passes.export_graph import ExportGraph, FusedGroup
from flowserve.ir.graph import PassResult
from flowserve.ir.passes.attention import match_fused_attention


def fuse_one(g: ExportGraph, softmax) -> bool:
    match = match_fused_attention(g, softmax)
    if match is None:
        return False
    group = FusedGroup(match.kind, softmax.scope, [n.op for n in match.nodes], match.output, match.detail())
    g.replace(match.nodes, match.node(softmax), group)
    return True


def fuse_attention(g: ExportGraph) -> PassResult:
    count = 0
    for node in list(g.ir.nodes):
        if node.op == "softmax" and node in g.ir.nodes and fuse_one(g, node):
            count += 1
    return PassResult(g, count > 0)
