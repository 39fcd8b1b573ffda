"""ONNX lowerings of the shape primitives, written so a dynamic batch axis keeps working."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from flowserve import dtypes
from flowserve.ir.interpreter import reshape_target  # one rule for the lowering and the oracle
from flowserve.onnx_backend.lowering.registry import lowering, simple
from flowserve.ops import shape as prims


@lowering(prims.reshape)
def lower_reshape(b, node, ctx):
    in_shape = ctx.meta(node.inputs[0]).shape
    target = reshape_target(in_shape, node.attrs["shape"], node.batch.get("shape", ())) \
        if ctx.dynamic_batch else node.attrs["shape"]
    b.op("Reshape", [node.inputs[0], ctx.shape_operand(node, "shape", target)], node.outputs)


@lowering(prims.permute)
def lower_permute(b, node, ctx):
    b.op("Transpose", node.inputs, node.outputs, perm=node.attrs["perm"])


@lowering(prims.expand)
def lower_expand(b, node, ctx):
    shape = list(node.attrs["shape"])
    if ctx.dynamic_batch:  # dims the input already has: 1 (Expand keeps the input's, whatever the batch)
        in_shape = ctx.meta(node.inputs[0]).shape
        marked = set(node.batch.get("shape", ()))
        offset = len(shape) - len(in_shape)
        for j, d in enumerate(in_shape):
            if d != 1 and shape[offset + j] == d and offset + j not in marked:
                shape[offset + j] = 1
    b.op("Expand", [node.inputs[0], ctx.shape_operand(node, "shape", shape)], node.outputs)


@lowering(prims.concat)
def lower_concat(b, node, ctx):
    b.op("Concat", node.inputs, node.outputs, axis=node.attrs["axis"])


@lowering(prims.slice_)
def lower_slice(b, node, ctx):
    a = node.attrs  # starts/ends that are the batch or an expression of it (x[1:], x[:B // 2]) read it at run time
    b.op("Slice", [node.inputs[0], ctx.shape_operand(node, "starts", a["starts"]),
                   ctx.shape_operand(node, "ends", a["ends"]), b.const(a["axes"]), b.const(a["steps"])], node.outputs)


@lowering(prims.slice_backward)
def lower_slice_backward(b, node, ctx):
    a = node.attrs
    shape = a["shape"]
    if all(s == 1 for s in a["steps"]):
        begin, end = [0] * len(shape), [0] * len(shape)
        for s, e, axis in zip(a["starts"], a["ends"], a["axes"]):
            begin[axis], end[axis] = s, shape[axis] - e
        b.op("Pad", [node.inputs[0], b.const(begin + end)], node.outputs)
        return
    # strided: scatter the gradient into zeros at the sliced positions
    grids = np.meshgrid(*[np.arange(d) for d in shape], indexing="ij")
    index = [slice(None)] * len(shape)
    for s, e, axis, st in zip(a["starts"], a["ends"], a["axes"], a["steps"]):
        index[axis] = slice(s, e, st)
    coords = np.stack([g[tuple(index)] for g in grids], axis=-1)
    dtype = ctx.meta(node.inputs[0]).dtype
    zeros = b.op1("ConstantOfShape", [b.const(shape)], value=_zero(dtype))
    b.op("ScatterND", [zeros, b.const(coords), node.inputs[0]], node.outputs)


def _zero(dtype: str):
    return numpy_helper.from_array(np.zeros(1, dtype=dtypes.from_name(dtype).np))

