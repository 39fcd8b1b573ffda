"""ONNX lowerings of the elementwise primitives."""

from __future__ import annotations

from flowserve.onnx_backend.builder import onnx_dtype
from flowserve.onnx_backend.lowering.registry import lowering, simple

for _op, _onnx in [("neg", "Neg"), ("exp", "Exp"), ("log", "Log"), ("sqrt", "Sqrt"), ("tanh", "Tanh"),
                   ("sigmoid", "Sigmoid"), ("relu", "Relu"), ("abs", "Abs"), ("sign", "Sign"),
                   ("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("div", "Div"), ("pow", "Pow"),
                   ("maximum", "Max"), ("minimum", "Min"), ("eq", "Equal"), ("lt", "Less"),
                   ("le", "LessOrEqual"), ("gt", "Greater"), ("ge", "GreaterOrEqual"), ("where", "Where")]:
    simple(_onnx, _op)


@lowering("ne")
def lower_ne(b, node, ctx):
    b.op("Not", [b.op1("Equal", node.inputs)], node.outputs)


@lowering("cast")
def lower_cast(b, node, ctx):
    b.op("Cast", node.inputs, node.outputs, to=onnx_dtype(node.attrs["dtype"]))
