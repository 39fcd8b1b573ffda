"""ONNX lowering of the normalisation primitives: training-mode batch normalisation
(``batch_norm_train``) and layer normalisation (``layer_norm_stats``, at the end).

Batch norm: two ReduceMean and four full-tensor ops: ``d = x - mean``, ``d * d``, ``d * scale``,
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

On ONNX Runtime's CUDA provider (each node a kernel launch; its CUDA kernel refuses
training-mode ``BatchNormalization`` at opset >= 14) the statistics are two ``ReduceMean``
(``d = x - mean`` computed once) and the normalisation one inference-mode
``BatchNormalization`` of ``d`` (mean 0, the batch's variance): ``w * d / sqrt(var + eps) + b``,
as eager mode computes it. The backward that ``flowserve.ir.passes.batch_norm_grad`` fuses
(``fused.BatchNormBackward``) reuses that ``d``: two ``ReduceSum`` and, with
``h = g - d * sum(g * d) / (n * (var + eps))``, ``gx = w * (h - sum(g) / n) / sqrt(var + eps)``,
again one inference-mode ``BatchNormalization`` (of ``h``, with mean ``sum(g) / n``).
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.ir.interpreter import reshape_target
from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import batch_norm as prims
from flowserve.ops import layer_norm as layer_norm_ops


@lowering(prims.batch_norm_train)
def lower_batch_norm_train(b, node, ctx):
    """The training-mode kernel where the module docstring says, else the standard
    operators, where ``d = x - mean`` is written exactly as the gradient writes it
    (``reshape(mean)`` to ``(1, C, 1, ...)``), so that ONNX Runtime's common-subexpression
    pass computes it once for the forward and the backward pass."""
    x, weight, bias = node.inputs
    y, mean, var = node.outputs
    meta = ctx.meta(x)
    if ctx.cuda_provider:
        _lower_batch_norm_train_cuda(b, node, ctx)
        return
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


def _stats_axes(b, meta) -> tuple:
    """(the reduced axes, the per-channel shape ``(1, C, 1, ...)``) as int64 constants."""
    channel = [1, int(meta.shape[1])] + [1] * (len(meta.shape) - 2)
    return b.const([0] + list(range(2, len(meta.shape)))), b.const(channel)


def _centred(b, x: str, mean: str, meta, ctx) -> str:
    """``x - reshape(mean)``: the value the forward computed, else computed here."""
    key = ("batch_norm_centred", x, mean)
    if key not in ctx.saved:
        ctx.saved[key] = b.op1("Sub", [x, b.op1("Reshape", [mean, _stats_axes(b, meta)[1]])])
    return ctx.saved[key]


def _lower_batch_norm_train_cuda(b, node, ctx):
    """Six nodes: ``mean``, ``d = x - mean``, ``var = mean(d * d)``, ``y`` (module docstring)."""
    x, weight, bias = node.inputs
    y, mean, var = node.outputs
    meta = ctx.meta(x)
    axes, _ = _stats_axes(b, meta)
    b.op("ReduceMean", [x, axes], [mean], keepdims=0)
    d = _centred(b, x, mean, meta, ctx)
    b.op("ReduceMean", [b.op1("Mul", [d, d]), axes], [var], keepdims=0)
    zero = b.const(np.zeros(int(meta.shape[1])), dtypes.from_name(meta.dtype).np)
    b.op("BatchNormalization", [d, weight, bias, zero, var], [y], epsilon=float(node.attrs["eps"]))


def lower_batch_norm_backward(b, node, ctx):
    """``fused.BatchNormBackward(g, x, weight, mean, var) -> (gx, gb[, gw])`` for CUDA: 11
    nodes, 13 with the weight's gradient, where the forward's ``d`` is reused (module docstring)."""
    g, x, weight, mean, var = node.inputs
    gx, gb = node.outputs[:2]
    meta = ctx.meta(x)
    np_dtype = dtypes.from_name(meta.dtype).np
    axes, channel = _stats_axes(b, meta)
    n = int(np.prod([int(s) for s in meta.shape], dtype=np.int64)) // int(meta.shape[1])
    d = _centred(b, x, mean, meta, ctx)
    b.op("ReduceSum", [g, axes], [gb], keepdims=0)
    sum_gd = b.op1("ReduceSum", [b.op1("Mul", [g, d]), axes], keepdims=0)
    var_eps = b.op1("Add", [var, b.const(node.attrs["eps"], np_dtype)])
    if len(node.outputs) > 2:
        b.op("Div", [sum_gd, b.op1("Sqrt", [var_eps])], [node.outputs[2]])
    q = b.op1("Div", [sum_gd, b.op1("Mul", [var_eps, b.const(float(n), np_dtype)])])
    h = b.op1("Sub", [g, b.op1("Mul", [d, b.op1("Reshape", [q, channel])])])
    mean_g = b.op1("Div", [gb, b.const(float(n), np_dtype)])
    zero = b.const(np.zeros(int(meta.shape[1])), np_dtype)
    b.op("BatchNormalization", [h, weight, zero, mean_g, var], [gx], epsilon=float(node.attrs["eps"]))


@lowering(layer_norm_ops.layer_norm_stats)
def lower_layer_norm_stats(b, node, ctx):
    """One ``LayerNormalization`` (opset 17) for float32, whose optional outputs are the
    mean and ``1 / sqrt(var + eps)``; other dtypes (float64, whose statistics the operator
    would keep in float32, and the low-precision ones) as the standard operators."""
    x, weight, bias = node.inputs
    y, mean, rstd = node.outputs
    meta = ctx.meta(x)
    dims, eps = int(node.attrs["dims"]), float(node.attrs["eps"])
    if meta.dtype == "float32" and b.opset >= 17:
        b.op("LayerNormalization", [x, weight, bias], [y, mean, rstd], axis=len(meta.shape) - dims,
             epsilon=eps, stash_type=1)
        return
    axes = b.const(layer_norm_ops.normalised_axes(len(meta.shape), dims))
    b.op("ReduceMean", [x, axes], [mean], keepdims=1)
    d = b.op1("Sub", [x, mean])
    var = b.op1("ReduceMean", [b.op1("Mul", [d, d]), axes], keepdims=1)
    b.op("Reciprocal", [b.op1("Sqrt", [b.op1("Add", [var, b.const(eps, dtypes.from_name(meta.dtype).np)])])],
         [rstd])
    b.op("Add", [b.op1("Mul", [b.op1("Mul", [d, rstd]), weight]), bias], [y])
