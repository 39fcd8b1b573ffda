"""ONNX lowerings of the convolution primitives (attributes are ONNX's already).

Two rewrites make training graphs run faster on ONNX Runtime's CPU provider, whose
``Conv`` kernels are faster than its ``ConvTranspose``:

- a pointwise transposed convolution (1x1 kernel, stride 1, no padding, one group: the
  input gradient of a pointwise convolution) is one ``MatMul`` of the weight as a
  ``(C, O)`` matrix with the gradient as ``(N, O, H*W)``;
- a stride-1 ``conv_transpose`` (the input gradient of every stride-1 convolution) is a
  ``Conv`` with the kernel flipped and its in/out channels swapped per group, padded by
  ``dilation * (kernel - 1) - pads``.

Both change only the summation order of the same products.
"""

from __future__ import annotations

from flowserve.exporter.lowering.registry import lowering

INT64_MIN = -(2**63)


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


@lowering("conv")
def lower_conv(b, node, ctx):
    # pointwise forward convolutions stay Conv: as a MatMul they measured no faster
    b.op("Conv", node.inputs, node.outputs, **_common(node, ctx))


def _flipped_pads(node, ctx) -> list | None:
    """Pads of the ``Conv`` equal to this stride-1 ``conv_transpose`` (None: no such Conv)."""
    a = node.attrs
    kernel = ctx.meta(node.inputs[1]).shape[2:]
    r = len(kernel)
    reach = [d * (k - 1) for d, k in zip(a["dilation"], kernel)]
    pads = [reach[i] - a["pads"][i] for i in range(r)]
    pads += [reach[i] - a["pads"][r + i] + a["output_padding"][i] for i in range(r)]
    return pads if min(pads) >= 0 else None


def _flipped_kernel(b, w: str, shape, groups: int) -> str:
    """``(C_in, C_out/g, *k)`` transposed-conv weight -> ``(C_out, C_in/g, *k)`` Conv weight, flipped."""
    c_in, c_out_g, *kernel = shape
    c_in_g = c_in // groups
    if groups == 1:
        w = b.op1("Transpose", [w], perm=[1, 0, *range(2, 2 + len(kernel))])
    elif c_in_g != 1 or c_out_g != 1:
        w = b.op1("Reshape", [w, b.const([groups, c_in_g, c_out_g, *kernel])])
        w = b.op1("Transpose", [w], perm=[0, 2, 1, *range(3, 3 + len(kernel))])
        w = b.op1("Reshape", [w, b.const([groups * c_out_g, c_in_g, *kernel])])
    r = len(kernel)
    return b.op1("Slice", [w, b.const([-1] * r), b.const([INT64_MIN] * r), b.const(list(range(2, 2 + r))),
                           b.const([-1] * r)])


@lowering("conv_transpose")
def lower_conv_transpose(b, node, ctx):
    a = node.attrs
    if _pointwise(node, ctx):
        _matmul_conv_transpose(b, node, ctx)
        return
    pads = _flipped_pads(node, ctx) if all(s == 1 for s in a["stride"]) else None
    if pads is not None:
        kernel = _flipped_kernel(b, node.inputs[1], ctx.meta(node.inputs[1]).shape, int(a["groups"]))
        b.op("Conv", [node.inputs[0], kernel], node.outputs, **{**_common(node, ctx), "pads": pads})
        return
    # output_padding, never output_shape: ORT computes some strides wrongly with output_shape
    b.op("ConvTranspose", node.inputs, node.outputs, output_padding=list(a["output_padding"]),
         **_common(node, ctx))
