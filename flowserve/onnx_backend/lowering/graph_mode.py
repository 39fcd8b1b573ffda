"""Lowerings of the nodes that graph mode's own IR fusions make (never in a saved graph,
so not primitives): ``fused.AddToOutput`` is ONNX ``Gemm`` (``y = x @ w + c``)."""

from __future__ import annotations

from flowserve.ir.passes.fuse_add_to_output import FUSED_OP as ADD_TO_OUTPUT


def lower_add_to_output(b, node, ctx) -> None:
    b.op("Gemm", node.inputs, node.outputs)


GRAPH_MODE_LOWERINGS = {ADD_TO_OUTPUT: lower_add_to_output}
