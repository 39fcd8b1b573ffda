"""ONNX lowering of training-mode batch normalisation (``batch_norm_train``).

Two ReduceMean and four full-tensor ops: ``d = x - mean``, ``d * d``, ``d * scale``,
``+ bias``, with ``scale = weight / sqrt(var + eps)`` per channel.
"""

from __future__ import annotations

from flowserve import dtypes
from flowserve.ir.interpreter import reshape_target
from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import batch_norm as prims


@lowering(prims.batch_norm_train)
def lower_batch_norm_train(b, node, ctx):
    """``d = x - mean`` is written exactly as the gradient writes it (``reshape(mean)``
    to ``(1, C, 1, ...)``), so that ONNX Runtime's common-subexpression pass computes it
    once for the forward and the backward pass."""
    x, weight, bias = node.inputs
    y, mean, var = node.outputs
    meta = ctx.meta(x)
    axes = b.const([0] + list(range(2, len(meta.shape))))
    channel = [1, meta.shape[1]] + [1] * (len(meta.shape) - 2)
    channel = b.const(reshape_target((meta.shape[1],), channel) if ctx.dynamic_batch else channel)
    b.op("ReduceMean", [x, axes], [mean], keepdims=0)
    d = b.op1("Sub", [x, b.op1("Reshape", [mean, channel])])
    b.op("ReduceMean", [b.op1("Mul", [d, d]), axes], [var], keepdims=0)
    eps = b.const(node.attrs["eps"], dtypes.from_name(meta.dtype).np)
    scale = b.op1("Reshape", [b.op1("Div", [weight, b.op1("Sqrt", [b.op1("Add", [var, eps])])]), channel])
    b.op("Add", [b.op1("Mul", [d, scale]), b.op1("Reshape", [bias, channel])], [y])
