"""ONNX lowerings of the ordering primitives: TopK (also sort/argsort) and CumSum."""

from __future__ import annotations

from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import sorting as prims


@lowering(prims.topk)
def lower_topk(b, node, ctx):
    a = node.attrs
    b.op("TopK", [node.inputs[0], b.const([a["k"]])], node.outputs, axis=a["axis"],
         largest=int(a["largest"]), sorted=1)


@lowering(prims.cumsum)
def lower_cumsum(b, node, ctx):
    if not ctx.meta(node.inputs[0]).shape:
        b.op("Identity", node.inputs, node.outputs)
        return
    b.op("CumSum", [node.inputs[0], b.const(node.attrs["axis"])], node.outputs,
         reverse=int(node.attrs["reverse"]))
