"""ONNX lowerings of the elementwise-math primitives (``flowserve.ops.math``)."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.onnx_backend.lowering.float64 import emit_erf_f64, is_double
from flowserve.onnx_backend.lowering.registry import lowering, simple
from flowserve.ops import math as prims

for _prim, _onnx in [(prims.sin, "Sin"), (prims.cos, "Cos"), (prims.floor, "Floor"), (prims.ceil, "Ceil"),
                     (prims.round_, "Round")]:
    simple(_onnx, _prim)
simple("Mod", prims.fmod, fmod=1)


@lowering(prims.erf)
def lower_erf(b, node, ctx):
    if is_double(ctx, node.inputs[0]):  # ONNX Runtime's Erf has no double kernel
        emit_erf_f64(b, node.inputs[0], node.outputs[0])
        return
    b.op("Erf", node.inputs, node.outputs)


def _one(b, ctx, name: str) -> str:
    return b.const(1, dtypes.from_name(ctx.meta(name).dtype).np)


@lowering(prims.expm1)
def lower_expm1(b, node, ctx):
    b.op("Sub", [b.op1("Exp", node.inputs), _one(b, ctx, node.inputs[0])], node.outputs)


@lowering(prims.log1p)
def lower_log1p(b, node, ctx):
    b.op("Log", [b.op1("Add", [node.inputs[0], _one(b, ctx, node.inputs[0])])], node.outputs)


def _bitwise(logical: str, bitwise: str):
    def lower(b, node, ctx):
        is_bool = ctx.meta(node.inputs[0]).dtype == "bool"
        b.op(logical if is_bool else bitwise, node.inputs, node.outputs)

    return lower


lowering(prims.bitwise_and)(_bitwise("And", "BitwiseAnd"))
lowering(prims.bitwise_or)(_bitwise("Or", "BitwiseOr"))
lowering(prims.bitwise_xor)(_bitwise("Xor", "BitwiseXor"))
lowering(prims.bitwise_not)(_bitwise("Not", "BitwiseNot"))


@lowering(prims.prod)
def lower_prod(b, node, ctx):
    axes = node.attrs["axes"]
    if not axes:
        b.op("Identity", node.inputs, node.outputs)
        return
    b.op("ReduceProd", [node.inputs[0], b.const(axes)], node.outputs, keepdims=int(node.attrs["keepdims"]))
