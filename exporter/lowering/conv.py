"""ONNX lowerings of the convolution primitives (attributes are ONNX's already)."""

from __future__ import annotations

from flowserve.exporter.lowering.registry import lowering


def _common(node, ctx) -> dict:
    a = node.attrs
    kernel = list(ctx.meta(node.inputs[1]).shape[2:])
    return dict(kernel_shape=kernel, strides=list(a["stride"]), pads=list(a["pads"]),
                dilations=list(a["dilation"]), group=int(a["groups"]))


@lowering("conv")
def lower_conv(b, node, ctx):
    b.op("Conv", node.inputs, node.outputs, **_common(node, ctx))


@lowering("conv_transpose")
def lower_conv_transpose(b, node, ctx):
    # output_padding, never output_shape: ORT computes some strides wrongly with output_shape
    b.op("ConvTranspose", node.inputs, node.outputs, output_padding=list(node.attrs["output_padding"]),
         **_common(node, ctx))
