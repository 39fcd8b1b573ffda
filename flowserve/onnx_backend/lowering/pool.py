"""ONNX lowerings of the pooling primitives."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from flowserve import dtypes
from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import pool as prims


def _max_pool_attrs(a) -> dict:
    return dict(kernel_shape=list(a["kernel"]), strides=list(a["stride"]), pads=list(a["pads"]) * 2,
                dilations=list(a["dilation"]), ceil_mode=int(a["ceil_mode"]))


@lowering(prims.max_pool2d)
def lower_max_pool2d(b, node, ctx):
    b.op("MaxPool", node.inputs, node.outputs, **_max_pool_attrs(node.attrs))


@lowering(prims.max_pool2d_indices)
def lower_max_pool2d_indices(b, node, ctx):
    b.op("MaxPool", node.inputs, [b.fresh("max_pool_values"), node.outputs[0]], **_max_pool_attrs(node.attrs))


@lowering(prims.max_pool2d_backward)
def lower_max_pool2d_backward(b, node, ctx):
    g, indices = node.inputs
    shape = list(node.attrs["shape"])
    dtype = dtypes.from_name(ctx.meta(g).dtype).np
    zeros = b.op1("ConstantOfShape", [b.const([int(np.prod(shape))])],
                  value=numpy_helper.from_array(np.zeros(1, dtype=dtype)))
    flat = b.const([-1])
    summed = b.op1("ScatterElements", [zeros, b.op1("Reshape", [indices, flat]), b.op1("Reshape", [g, flat])],
                   axis=0, reduction="add")
    b.op("Reshape", [summed, b.const(shape)], node.outputs)
