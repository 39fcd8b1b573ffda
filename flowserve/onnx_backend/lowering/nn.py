"""ONNX lowerings of the nn primitives."""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.onnx_backend.builder import onnx_dtype
from flowserve.onnx_backend.lowering.registry import lowering, simple
from flowserve.ops import nn as prims

simple("MatMul", prims.matmul)
simple("Identity", prims.copy)
simple("Identity", prims.to_device)  # a graph runs on one device


@lowering(prims.log_softmax)
def lower_log_softmax(b, node, ctx):
    b.op("LogSoftmax", node.inputs, node.outputs, axis=node.attrs["axis"])


@lowering(prims.softmax)
def lower_softmax(b, node, ctx):
    b.op("Softmax", node.inputs, node.outputs, axis=node.attrs["axis"])


@lowering(prims.one_hot)
def lower_one_hot(b, node, ctx):
    double = node.attrs["dtype"] == "float64"  # no double OneHot kernel: float32 0/1, cast exactly
    values = b.const([0, 1], np.float32 if double else dtypes.from_name(node.attrs["dtype"]).np)
    depth = b.const(node.attrs["num_classes"])
    indices = node.inputs[0]
    if ctx.meta(indices).dtype != "int64":  # ONNX Runtime's OneHot has int64 and float kernels only
        indices = b.op1("Cast", [indices], to=onnx_dtype("int64"))
    if not double:
        b.op("OneHot", [indices, depth, values], node.outputs, axis=-1)
        return
    b.op("Cast", [b.op1("OneHot", [indices, depth, values], axis=-1)], node.outputs, to=onnx_dtype("float64"))
