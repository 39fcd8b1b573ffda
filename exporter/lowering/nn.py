"""ONNX lowerings of the nn primitives."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.exporter.lowering.registry import lowering, simple

simple("MatMul", "matmul")


@lowering("log_softmax")
def lower_log_softmax(b, node, ctx):
    b.op("LogSoftmax", node.inputs, node.outputs, axis=node.attrs["axis"])


@lowering("softmax")
def lower_softmax(b, node, ctx):
    b.op("Softmax", node.inputs, node.outputs, axis=node.attrs["axis"])


@lowering("one_hot")
def lower_one_hot(b, node, ctx):
    values = b.const([0, 1], dtypes.from_name(node.attrs["dtype"]).np)
    depth = b.const(node.attrs["num_classes"])
    b.op("OneHot", [node.inputs[0], depth, values], node.outputs, axis=-1)
