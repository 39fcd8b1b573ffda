"""ONNX lowerings of the indexing primitives: GatherElements, ScatterElements, Gather."""

from __future__ import annotations

from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import indexing as prims


def _data_cut_to_index(b, node, ctx) -> str:
    """GatherElements wants data no larger than the index in the other dims: slice it."""
    data, index = node.inputs[0], node.inputs[1]
    d_shape, i_shape = ctx.meta(data).shape, ctx.meta(index).shape
    axis = node.attrs["axis"]
    cut = [d for d in range(len(d_shape)) if d != axis and 0 <= i_shape[d] < d_shape[d]]
    if not cut:
        return data
    return b.op1("Slice", [data, b.const([0] * len(cut)), b.const([i_shape[d] for d in cut]), b.const(cut)])


@lowering(prims.gather)
def lower_gather(b, node, ctx):
    data = _data_cut_to_index(b, node, ctx)
    b.op("GatherElements", [data, node.inputs[1]], node.outputs, axis=node.attrs["axis"])


@lowering(prims.scatter)
def lower_scatter(b, node, ctx):
    b.op("ScatterElements", node.inputs, node.outputs, axis=node.attrs["axis"])


@lowering(prims.scatter_add)
def lower_scatter_add(b, node, ctx):
    b.op("ScatterElements", node.inputs, node.outputs, axis=node.attrs["axis"], reduction="add")


@lowering(prims.take)
def lower_take(b, node, ctx):
    b.op("Gather", node.inputs, node.outputs, axis=node.attrs["axis"])
