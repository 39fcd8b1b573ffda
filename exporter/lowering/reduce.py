"""ONNX lowerings of the reduction primitives."""

from __future__ import annotations

from flowserve.exporter.lowering.registry import lowering


def _reduce(op_type: str):
    def lower(b, node, ctx):
        axes = node.attrs["axes"]
        if not axes:
            b.op("Identity", node.inputs, node.outputs)
            return
        b.op(op_type, [node.inputs[0], b.const(axes)], node.outputs, keepdims=int(node.attrs["keepdims"]))

    return lower


lowering("sum")(_reduce("ReduceSum"))
lowering("amax")(_reduce("ReduceMax"))
lowering("amin")(_reduce("ReduceMin"))


def _arg(op_type: str):
    def lower(b, node, ctx):
        b.op(op_type, node.inputs, node.outputs, axis=node.attrs["axis"], keepdims=int(node.attrs["keepdims"]))

    return lower


lowering("argmax")(_arg("ArgMax"))
lowering("argmin")(_arg("ArgMin"))
