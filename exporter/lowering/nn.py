"""ONNX lowerings of the nn primitives."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.exporter.builder import onnx_dtype
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
    indices = node.inputs[0]
    if ctx.meta(indices).dtype != "int64":  # ONNX Runtime's OneHot has int64 and float kernels only
        indices = b.op1("Cast", [indices], to=onnx_dtype("int64"))
    b.op("OneHot", [indices, depth, values], node.outputs, axis=-1)
