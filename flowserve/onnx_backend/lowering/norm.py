"""ONNX lowering of training-mode batch normalisation (``batch_norm_train``).

Two ReduceMean and four full-tensor ops: ``d = x - mean``, ``d * d``, ``d * scale``,
``+ bias``, with ``scale = weight / sqrt(var + eps)`` per channel. On ONNX Runtime's CPU
provider (graph mode), a float32 or float64 one is one ``BatchNormalization`` in training
mode instead: with ``momentum=0`` its "running" statistics are the batch's mean and biased
variance, and its kernel passes over the input about half as often (ResNet-18 and
MobileNetV2 training steps, ``bench/profile_ort_ops.py``). ONNX Runtime writes the
running outputs into the buffers of the running inputs, and shares equal initializers
between nodes: with constant inputs, one layer's statistics overwrote another's (measured:
wrong running means). So the running inputs are ``weight * 0`` and ``bias * 0`` (C values
each, computed each run, two expressions so that they stay two buffers), and the kernel is
used only where ``weight`` and ``bias`` are graph inputs (parameters fed each step), which
no optimizer folds into constants. Other engines keep the standard
operators (cuDNN's running variance is the unbiased one), and so does a graph with
``config.allow_cpu_batch_norm_kernel(False)``.
"""

from __future__ import annotations

from flowserve import dtypes
from flowserve.ir.interpreter import reshape_target
from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import batch_norm as prims


@lowering(prims.batch_norm_train)
def lower_batch_norm_train(b, node, ctx):
    """The training-mode kernel where the module docstring says, else the standard
    operators, where ``d = x - mean`` is written exactly as the gradient writes it
    (``reshape(mean)`` to ``(1, C, 1, ...)``), so that ONNX Runtime's common-subexpression
    pass computes it once for the forward and the backward pass."""
    x, weight, bias = node.inputs
    y, mean, var = node.outputs
    meta = ctx.meta(x)
    if ctx.batch_norm_kernel and meta.dtype in ("float32", "float64") and b.opset >= 15 \
            and {weight, bias} <= {v.name for v in b.inputs}:
        zero = b.const(0, dtypes.from_name(meta.dtype).np)
        running = [b.op1("Mul", [p, zero]) for p in (weight, bias)]  # two buffers (no common subexpression)
        b.op("BatchNormalization", [x, weight, bias, *running], [y, mean, var],
             epsilon=float(node.attrs["eps"]), momentum=0.0, training_mode=1)
        return
    axes = b.const([0] + list(range(2, len(meta.shape))))
    channel = [1, meta.shape[1]] + [1] * (len(meta.shape) - 2)
    channel = b.const(reshape_target((meta.shape[1],), channel) if ctx.dynamic_batch else channel)
    b.op("ReduceMean", [x, axes], [mean], keepdims=0)
    d = b.op1("Sub", [x, b.op1("Reshape", [mean, channel])])
    b.op("ReduceMean", [b.op1("Mul", [d, d]), axes], [var], keepdims=0)
    eps = b.const(node.attrs["eps"], dtypes.from_name(meta.dtype).np)
    scale = b.op1("Reshape", [b.op1("Div", [weight, b.op1("Sqrt", [b.op1("Add", [var, eps])])]), channel])
    b.op("Add", [b.op1("Mul", [d, scale]), b.op1("Reshape", [bias, channel])], [y])
