"""Quantized convolutions with their input channels padded to a multiple of 4: a rewrite of
int8 QDQ models.

ONNX Runtime runs an int8 convolution whose weights are symmetric (int8, zero points 0, as
both int8 exports hold them) with MLAS's symmetric convolution kernels where the shapes
allow: they requantize in the same pass and, on channels-last tensors, share a batch's
images among the threads. On AVX2 they take input channels in multiples of 4 and output
channels in multiples of 8, 16 at least (``KernelInputChannelAlignment``,
``KernelOutputChannelAlignment`` and ``FilterOutputChannelPackCount`` of MLAS's
``MlasConvSymDispatchAvx2``); any other convolution falls back to im2col, a GEMM and a
separate requantization, one image after another. A stem convolution, on an image's 3
colour channels, is such a one.

The rewrite pads such a convolution's quantized input with channels of its zero point
(``Pad`` on the uint8 tensor, before its ``DequantizeLinear``) and its int8 weight with
channels of zeros::

    model = pad_input_channels(model)   # the same outputs, bit for bit

The extra channels dequantize to 0 and meet zero weights, so each output is the same sum,
computed by the symmetric kernel. MobileNetV2 at 224x224 with an int8 stem (ONNX Runtime
1.31, AVX2 EPYC, one thread, ONNX Runtime's profiler): the stem's ``QLinearConv`` 1.50 ->
1.07 ms at batch 1, 102-118 -> 74-88 ms at batch 32 (docs/export.md).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from flowserve.exporter.packed_attention import drop_unused_initializers

INPUT_CHANNEL_MULTIPLE = 4  # MLAS's symmetric kernels: input channels in multiples of 4,
OUTPUT_CHANNEL_MULTIPLE, MIN_OUTPUT_CHANNELS = 8, 16  # output channels in multiples of 8, 16 at least


def pad_input_channels(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each ungrouped ``Conv`` between a per-tensor activation
    ``DequantizeLinear`` and a symmetric int8 weight's, whose input channels are not a
    multiple of 4 (and whose output channels suit the symmetric kernel), reading its input
    and weight padded with zero channels (in place; returned)."""
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    initializers = {t.name: t for t in graph.initializer}
    padded_weights, nodes, replaced = {}, [], []
    for node in graph.node:
        quantizers = _paddable(node, producers, initializers)
        if quantizers is not None:
            x_dq, w_dq = quantizers
            nodes += _padded_input(node, x_dq, initializers[w_dq.input[0]].dims, graph)
            if w_dq.output[0] not in padded_weights:
                padded_weights[w_dq.output[0]] = _padded_weight(w_dq, initializers, graph)
                nodes.append(padded_weights[w_dq.output[0]])
            node.input[1] = padded_weights[w_dq.output[0]].output[0]
            replaced += [x_dq, w_dq]
        nodes.append(node)
    if not replaced:
        return model
    read = {name for n in nodes for name in n.input} | {o.name for o in graph.output}
    del graph.node[:]
    graph.node.extend(n for n in nodes if not any(n is r for r in replaced) or n.output[0] in read)
    drop_unused_initializers(graph)
    return model


def _paddable(node: onnx.NodeProto, producers: dict, initializers: dict) -> Optional[tuple]:
    """(activation DequantizeLinear, weight DequantizeLinear) of a Conv the rewrite pads, or None."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if (node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or attrs.get("group", 1) != 1
            or len(node.input) < 2):
        return None
    x_dq, w_dq = producers.get(node.input[0]), producers.get(node.input[1])
    if not (_is_dequantize(x_dq) and _is_dequantize(w_dq)) or x_dq.input[0] in initializers:
        return None
    scale = initializers.get(x_dq.input[1])
    weight = initializers.get(w_dq.input[0])
    if scale is None or int(np.prod(scale.dims)) != 1 or weight is None or weight.data_type != onnx.TensorProto.INT8:
        return None
    if len(w_dq.input) > 2 and w_dq.input[2]:
        zero_point = initializers.get(w_dq.input[2])
        if zero_point is None or numpy_helper.to_array(zero_point).any():
            return None
    if len(weight.dims) < 3:
        return None
    outputs, channels = weight.dims[0], weight.dims[1]
    if channels % INPUT_CHANNEL_MULTIPLE == 0 or outputs < MIN_OUTPUT_CHANNELS or outputs % OUTPUT_CHANNEL_MULTIPLE:
        return None
    return x_dq, w_dq


def _is_dequantize(node: Optional[onnx.NodeProto]) -> bool:
    return node is not None and node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx")


def _missing_channels(channels: int) -> int:
    return -channels % INPUT_CHANNEL_MULTIPLE


def _padded_input(conv: onnx.NodeProto, x_dq: onnx.NodeProto, weight_dims, graph: onnx.GraphProto) -> list:
    """The Pad of the quantized input (with its zero point) and its DequantizeLinear; the
    Conv reads the latter."""
    rank, missing = len(weight_dims), _missing_channels(weight_dims[1])
    base = conv.name or conv.output[0]
    pads = np.zeros(2 * rank, np.int64)
    pads[rank + 1] = missing  # after the last channel
    graph.initializer.append(numpy_helper.from_array(pads, f"{base}:channel_pads"))
    pad_inputs = [x_dq.input[0], f"{base}:channel_pads"] + ([x_dq.input[2]] if len(x_dq.input) > 2 else [])
    pad = helper.make_node("Pad", pad_inputs, [f"{base}:padded_input_q"], mode="constant", name=f"{base}:pad_input")
    dequantize = helper.make_node("DequantizeLinear", [pad.output[0]] + list(x_dq.input[1:]),
                                  [f"{base}:padded_input"], name=f"{base}:dequantize_padded_input")
    dequantize.attribute.extend(x_dq.attribute)
    conv.input[0] = dequantize.output[0]
    return [pad, dequantize]


def _padded_weight(w_dq: onnx.NodeProto, initializers: dict, graph: onnx.GraphProto) -> onnx.NodeProto:
    """The DequantizeLinear of the int8 weight with zero input channels appended."""
    weight = numpy_helper.to_array(initializers[w_dq.input[0]])
    zeros = np.zeros((weight.shape[0], _missing_channels(weight.shape[1])) + weight.shape[2:], weight.dtype)
    name = f"{w_dq.input[0]}:padded"
    graph.initializer.append(numpy_helper.from_array(np.concatenate([weight, zeros], axis=1), name))
    dequantize = helper.make_node("DequantizeLinear", [name] + list(w_dq.input[1:]), [f"{w_dq.output[0]}:padded"],
                                  name=f"{w_dq.name or w_dq.output[0]}:padded")
    dequantize.attribute.extend(w_dq.attribute)
    return dequantize
