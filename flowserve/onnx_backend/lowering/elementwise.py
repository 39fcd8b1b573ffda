"""ONNX lowerings of the elementwise primitives."""

from __future__ import annotations

from flowserve.onnx_backend.builder import onnx_dtype
from flowserve.onnx_backend.lowering.registry import lowering, simple
from flowserve.ops import elementwise as prims

for _prim, _onnx in [(prims.neg, "Neg"), (prims.exp, "Exp"), (prims.log, "Log"), (prims.sqrt, "Sqrt"),
                     (prims.tanh, "Tanh"), (prims.sigmoid, "Sigmoid"), (prims.relu, "Relu"),
                     (prims.abs_, "Abs"), (prims.sign, "Sign"), (prims.add, "Add"), (prims.sub, "Sub"),
                     (prims.mul, "Mul"), (prims.div, "Div"), (prims.pow_, "Pow"), (prims.maximum, "Max"),
                     (prims.minimum, "Min"), (prims.eq, "Equal"), (prims.lt, "Less"), (prims.le, "LessOrEqual"),
                     (prims.gt, "Greater"), (prims.ge, "GreaterOrEqual"), (prims.where, "Where")]:
    simple(_onnx, _prim)


@lowering(prims.ne)
def lower_ne(b, node, ctx):
    b.op("Not", [b.op1("Equal", node.inputs)], node.outputs)


@lowering(prims.cast)
def lower_cast(b, node, ctx):
    b.op("Cast", node.inputs, node.outputs, to=onnx_dtype(node.attrs["dtype"]))
