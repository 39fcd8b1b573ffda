"""Where each primitive's ONNX lowering is registered, by the primitive's name.

A lowering is ``fn(b, node, ctx)``: it appends ONNX nodes to builder ``b`` that compute
``node.outputs`` (exact names) from ``node.inputs``; ``ctx.meta(name)`` gives a value's
shape and dtype.
"""

from __future__ import annotations

from typing import Callable

from flowserve.errors import ExportError

LOWERINGS: dict[str, Callable] = {}


def lowering(*names: str):
    def register(fn: Callable) -> Callable:
        for name in names:
            if name in LOWERINGS:
                raise ExportError(f"ONNX lowering of {name!r} is registered twice")
            LOWERINGS[name] = fn
        return fn

    return register


def simple(op_type: str, *names: str, **fixed_attrs):
    """Register ``names`` as one ONNX node of ``op_type`` with the same inputs and outputs."""

    def lower(b, node, ctx):
        b.op(op_type, node.inputs, node.outputs, **fixed_attrs)

    for name in names:
        lowering(name)(lower)


class LoweringContext:
    def __init__(self, ir, builder, dynamic_batch: bool):
        self.ir = ir
        self.b = builder
        self.dynamic_batch = dynamic_batch

    def meta(self, name: str):
        return self.ir.values[name]
