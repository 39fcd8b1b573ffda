"""ONNX lowerings of the convolution primitives (attributes are ONNX's already).

Two rewrites make training graphs run faster on ONNX Runtime's CPU provider, whose
``Conv`` kernels are faster than its ``ConvTranspose``:

- a pointwise transposed convolution (1x1 kernel, stride 1, no padding, one group: the
  input gradient of a pointwise convolution) is one ``MatMul`` of the weight as a
  ``(C, O)`` matrix with the gradient as ``(N, O, H*W)``;
- a stride-1 ``conv_transpose`` (the input gradient of every stride-1 convolution) is a
  ``Conv`` with the kernel flipped and its in/out channels swapped per group, padded by
  ``dilation * (kernel - 1) - pads``; in graph mode on ONNX Runtime's CPU provider the flip
  is a product with the anti-diagonal permutation matrix (``_reversed_taps``), exact, where
  a ``Slice`` with steps of -1 copies element by element.

Both change only the summation order of the same products.

In graph mode on ONNX Runtime's CPU provider (``ctx.nchwc_block``), 2-D convolutions
with a kernel larger than 1x1 whose channels fill its NCHWc blocks (ungrouped, or
depthwise) run ONNX Runtime's blocked kernels: ``com.microsoft.nchwc`` ``ReorderInput``,
``Conv`` and ``ReorderOutput``. ONNX Runtime does that itself only for weights that are
initializers; a training graph feeds its weights, so the lowering reorders the weight in
the graph each step, as MLAS's ``MlasReorderFilterOIHWBiBo`` (``OIHWBo`` for depthwise)
lays it out: two transposes of the small weight. A grouped convolution with one output
channel per group (a depthwise convolution's weight gradient, each group summing over the
batch) becomes a depthwise one over every input channel and a sum per group. Convolutions
whose weight is larger than their output (ResNet's last 3x3 stage at 4x4) and 1x1 ones
measured faster as plain ``Conv`` and keep it. The same products are summed, in another
order.
"""

from __future__ import annotations

import numpy as np

from flowserve.onnx_backend.lowering.float64 import emit_conv_f64, emit_conv_transpose_f64, is_double
from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import conv as prims

INT64_MIN = -(2**63)
NCHWC = "com.microsoft.nchwc"


def _common(node, ctx) -> dict:
    a = node.attrs
    kernel = list(ctx.meta(node.inputs[1]).shape[2:])
    return dict(kernel_shape=kernel, strides=list(a["stride"]), pads=list(a["pads"]),
                dilations=list(a["dilation"]), group=int(a["groups"]))


def _pointwise(node, ctx) -> bool:
    a = node.attrs
    kernel = ctx.meta(node.inputs[1]).shape[2:]
    return (all(k == 1 for k in kernel) and all(s == 1 for s in a["stride"]) and not any(a["pads"])
            and a["groups"] == 1 and not any(a.get("output_padding", [])))


def _matmul_conv_transpose(b, node, ctx) -> None:
    """``y = W.T @ x`` per sample."""
    x, w = node.inputs
    w_shape, y_shape = ctx.meta(w).shape, ctx.meta(node.outputs[0]).shape
    rows, cols = w_shape[1], w_shape[0]
    matrix = b.op1("Transpose", [b.op1("Reshape", [w, b.const([w_shape[0], w_shape[1]])])], perm=[1, 0])
    flat = b.op1("Reshape", [x, b.const([0, cols, -1])])
    product = b.op1("MatMul", [matrix, flat])
    b.op("Reshape", [product, b.const([0, rows, *y_shape[2:]])], node.outputs)


def _nchwc_kind(ctx, x: str, w_shape, y: str, groups: int) -> str | None:
    """"dense", "depthwise" or "group_sum" where this convolution runs faster as NCHWc,
    else None. "group_sum": one output channel per group of several input channels (a
    depthwise convolution's weight gradient, whose groups sum over the batch), which is a
    depthwise convolution of every input channel followed by a sum over each group."""
    block = ctx.nchwc_block
    xm = ctx.meta(x)
    if not block or len(xm.shape) != 4 or xm.dtype != "float32" or len(w_shape) != 4:
        return None
    o, c_g, kh, kw = w_shape
    c = xm.shape[1]
    if kh * kw == 1:
        return None
    if groups > 1 and o == groups and c_g > 1 and c % block == 0:
        return "group_sum"  # measured 5-9x faster than the grouped Conv (MobileNetV2's shapes)
    if int(np.prod(w_shape)) > int(np.prod(ctx.meta(y).shape)):
        return None
    if groups == 1 and c % block == 0 and o % block == 0:
        return "dense"
    if groups == c == o and c_g == 1 and c % block == 0:
        return "depthwise"
    return None


def _nchwc_weight(b, w: str, shape, block: int, kind: str) -> str:
    """``(O, C/g, kh, kw)`` weight in MLAS's blocked layout (same shape): OIHWBiBo (output
    channel blocks, input channel blocks, taps, then an input x output channel block) for
    dense kernels, OIHWBo for depthwise ones. ``ReorderInput`` (NCHW -> NCHWc, MLAS's
    kernel) does most of it, 2-10x faster than ``Transpose`` with the block innermost: OIHWBo
    is the NCHWc layout of the weight read as one ``(1, O, kh, kw)`` image (a depthwise weight
    gradient's ``(N*C, 1, 2, 2)`` output gradient: 0.4 against 5.0 ms, median, load 5), and
    OIHWBiBo that of the weight read as ``O`` images of ``C`` channels, the output channels
    then moved innermost (256x256x3x3: 1.9 against 7.3 ms for two transposes)."""
    o, c_g, kh, kw = shape
    image = [1, o, kh, kw] if kind == "depthwise" else list(shape)
    w = b.op1("ReorderInput", [b.op1("Reshape", [w, b.const(image)])], b.fresh("nchwc_weight"), domain=NCHWC)
    if kind == "dense":
        w = b.op1("Reshape", [w, b.const([o // block, block, c_g * kh * kw])])
        w = b.op1("Transpose", [w], perm=[0, 2, 1])  # output channels innermost
    return b.op1("Reshape", [w, b.const(list(shape))])


def emit_conv(b, ctx, x: str, w: str, w_shape, y: str, attrs: dict) -> None:
    """``y = Conv(x, w)`` with ONNX ``attrs``: NCHWc where ``_nchwc_kind`` allows, else ``Conv``
    (in float64, which ONNX Runtime's ``Conv`` lacks, im2col and ``MatMul``)."""
    if is_double(ctx, x):
        emit_conv_f64(b, ctx, x, w, w_shape, y, attrs)
        return
    kind = _nchwc_kind(ctx, x, w_shape, y, attrs["group"])
    if kind is None:
        b.op("Conv", [x, w], [y], **attrs)
        return
    blocked = ctx.reordered.get(x)
    if blocked is None:
        blocked = ctx.reordered[x] = b.op1("ReorderInput", [x], b.fresh("nchwc_in"), domain=NCHWC)
    if kind == "group_sum":  # (G, m, kh, kw) -> m * G depthwise kernels, then each group's m outputs summed
        groups, per_group = int(w_shape[0]), int(w_shape[1])
        channels = groups * per_group
        w_shape = [channels, 1, *w_shape[2:]]
        w = b.op1("Reshape", [w, b.const(w_shape)])
        attrs = {**attrs, "group": channels}
        kind = "depthwise"
    out = b.op1("Conv", [blocked, _nchwc_weight(b, w, w_shape, ctx.nchwc_block, kind)], b.fresh("nchwc_conv"),
                domain=NCHWC, **attrs)
    if attrs["group"] == int(w_shape[0]) and int(w_shape[0]) != int(ctx.meta(y).shape[1]):
        n, c_out, oh, ow = ctx.meta(y).shape
        each = b.op1("ReorderOutput", [out], b.fresh("nchwc_out"), domain=NCHWC, channels=int(w_shape[0]))
        each = b.op1("Reshape", [each, b.const([-1, c_out, int(w_shape[0]) // c_out, oh * ow])])
        summed = b.op1("ReduceSum", [each, b.const([2])], keepdims=0)
        b.op("Reshape", [summed, b.const([-1, c_out, oh, ow])], [y])
        return
    b.op("ReorderOutput", [out], [y], domain=NCHWC, channels=int(w_shape[0]))


@lowering(prims.conv)
def lower_conv(b, node, ctx):
    # pointwise forward convolutions stay Conv: as a MatMul they measured no faster
    x, w = node.inputs
    emit_conv(b, ctx, x, w, ctx.meta(w).shape, node.outputs[0], _common(node, ctx))


def _flipped_pads(node, ctx) -> list | None:
    """Pads of the ``Conv`` equal to this stride-1 ``conv_transpose`` (None: no such Conv)."""
    a = node.attrs
    kernel = ctx.meta(node.inputs[1]).shape[2:]
    r = len(kernel)
    reach = [d * (k - 1) for d, k in zip(a["dilation"], kernel)]
    pads = [reach[i] - a["pads"][i] for i in range(r)]
    pads += [reach[i] - a["pads"][r + i] + a["output_padding"][i] for i in range(r)]
    return pads if min(pads) >= 0 else None


def _reversed_taps(b, w: str, shape) -> str:
    """``w`` flipped along every kernel axis (its flattened taps reversed), as a product with
    the anti-diagonal permutation matrix: exact (each result is one weight times 1 plus
    zeros), and on ONNX Runtime's CPU provider about a fifth of the time of a ``Slice`` with
    steps of -1 (a 512x512x3x3 weight: 5 against 28 ms, load 5-8)."""
    taps = int(np.prod(shape[2:]))
    flat = b.op1("Reshape", [w, b.const([-1, taps])])
    flipped = b.op1("MatMul", [flat, b.const(np.eye(taps)[::-1], np.float32)])
    return b.op1("Reshape", [flipped, b.const(list(shape))])


def _flipped_kernel(b, w: str, shape, groups: int, by_product: bool = False) -> str:
    """``(C_in, C_out/g, *k)`` transposed-conv weight -> ``(C_out, C_in/g, *k)`` Conv weight,
    flipped (``by_product``, float32 only: ``_reversed_taps`` first, else a ``Slice`` last)."""
    c_in, c_out_g, *kernel = shape
    c_in_g = c_in // groups
    if by_product:
        w = _reversed_taps(b, w, shape)
    if groups == 1:
        w = b.op1("Transpose", [w], perm=[1, 0, *range(2, 2 + len(kernel))])
    elif c_in_g != 1 or c_out_g != 1:
        w = b.op1("Reshape", [w, b.const([groups, c_in_g, c_out_g, *kernel])])
        w = b.op1("Transpose", [w], perm=[0, 2, 1, *range(3, 3 + len(kernel))])
        w = b.op1("Reshape", [w, b.const([groups * c_out_g, c_in_g, *kernel])])
    if by_product:
        return w
    r = len(kernel)
    return b.op1("Slice", [w, b.const([-1] * r), b.const([INT64_MIN] * r), b.const(list(range(2, 2 + r))),
                           b.const([-1] * r)])


@lowering(prims.conv_transpose)
def lower_conv_transpose(b, node, ctx):
    a = node.attrs
    if _pointwise(node, ctx):
        _matmul_conv_transpose(b, node, ctx)
        return
    if is_double(ctx, node.inputs[0]):  # ONNX Runtime has no double ConvTranspose
        emit_conv_transpose_f64(b, ctx, node, _flipped_kernel)
        return
    pads = _flipped_pads(node, ctx) if all(s == 1 for s in a["stride"]) else None
    if pads is not None:
        shape = ctx.meta(node.inputs[1]).shape
        kernel = _flipped_kernel(b, node.inputs[1], shape, int(a["groups"]),
                                 by_product=ctx.cpu_provider and ctx.meta(node.inputs[1]).dtype == "float32")
        groups = int(a["groups"])
        conv_shape = [shape[1] * groups, shape[0] // groups, *shape[2:]]
        emit_conv(b, ctx, node.inputs[0], kernel, conv_shape, node.outputs[0], {**_common(node, ctx), "pads": pads})
        return
    # output_padding, never output_shape: ORT computes some strides wrongly with output_shape
    b.op("ConvTranspose", node.inputs, node.outputs, output_padding=list(a["output_padding"]),
         **_common(node, ctx))
