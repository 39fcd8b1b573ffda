"""IR -> ONNX: lower every node through its registered lowering."""

from __future__ import annotations

import numpy as np
import onnx

from flowserve.errors import ExportError
from flowserve.exporter import versions
from flowserve.exporter.builder import Builder
from flowserve.exporter.lowering import LOWERINGS, LoweringContext
from flowserve.exporter.lowering.clip import fold_clip
from flowserve.exporter.lowering.graph_mode import GRAPH_MODE_LOWERINGS
from flowserve.ir.graph import GraphIR

UPDATE_SUFFIX = ":new"


def _batch_shape(shape, batch: int | None) -> list:
    shape = list(shape)
    if batch is not None and shape and shape[0] == batch:
        shape[0] = -1
    return shape


def lower_ir(ir: GraphIR, baked: dict, *, state_inputs=(), state_outputs=(), dynamic_batch: bool = False,
             opset: int = versions.DEFAULT_OPSET, lowerings: dict | None = None) -> onnx.ModelProto:
    """An ONNX model of ``ir``.

    ``baked``: state name -> array, written as initializers (parameters of inference graphs,
    constants). ``state_inputs``: state fed per call. ``state_outputs``: state whose new
    value (``ir.updates``) is returned as output ``<name>:new``. ``dynamic_batch``: dim 0 of
    the inputs (and of outputs of the same size) becomes the symbolic ``batch`` axis.
    ``lowerings``: extra op name -> lowering, consulted first (the exporter's fused groups).
    """
    b = Builder(opset)
    batch = ir.inputs[0].shape[0] if dynamic_batch and ir.inputs and ir.inputs[0].shape else None
    for v in ir.inputs:
        b.input(v.name, v.dtype, _batch_shape(v.shape, batch))
    for name in state_inputs:
        v = ir.state[name]
        b.input(name, v.dtype, v.shape)
    for name, array in baked.items():
        b.initializer(name, np.asarray(array))
    ctx = LoweringContext(ir, b, dynamic_batch)
    for node in ir.nodes:
        lower = (lowerings or {}).get(node.op) or LOWERINGS.get(node.op) or GRAPH_MODE_LOWERINGS.get(node.op)
        if lower is None:
            raise ExportError(f"op {node.op!r} (node {node.outputs[0]!r} in scope {node.scope!r}) has no ONNX lowering")
        lower(b, node, ctx)
    for v in ir.outputs:
        b.output(v.name, v.dtype, _batch_shape(v.shape, batch))
    for name in state_outputs:
        v = ir.state[name]
        out = b.op1("Identity", [ir.updates[name]], name + UPDATE_SUFFIX)
        b.output(out, v.dtype, v.shape)
    fold_clip(b, keep={v.name for v in ir.outputs})
    return b.model(ir.name)
