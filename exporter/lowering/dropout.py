"""ONNX lowering of dropout's random keep-mask (``RandomUniformLike``; unseeded, so each run
of the graph draws a fresh mask)."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.exporter.builder import onnx_dtype
from flowserve.exporter.lowering.registry import lowering


@lowering("dropout_mask")
def lower_dropout_mask(b, node, ctx):
    x = node.inputs[0]
    dtype = ctx.meta(x).dtype
    uniform = b.op1("RandomUniformLike", [x], dtype=onnx_dtype(dtype), low=0.0, high=1.0)
    keep = b.op1("GreaterOrEqual", [uniform, b.const(node.attrs["p"], dtypes.from_name(dtype).np)])
    b.op("Cast", [keep], node.outputs, to=onnx_dtype(dtype))
