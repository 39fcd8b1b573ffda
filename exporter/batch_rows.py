"""Pointwise convolutions over the whole batch at once: a rewrite before static int8.

ONNX Runtime's ``QLinearConv`` loops over the images of a batch one at a time and
splits only each image's pixels among threads. A 1x1 convolution on a small feature map
(MobileNetV2 on 32x32 inputs ends at 2x2 and 1x1 pixels) then runs as many tiny
GEMMs, one per image, which neither fills the int8 kernels nor the threads. A 1x1
convolution does not mix pixels, so the batch can be laid out as one tall image: in
channels-last order ``[N, H, W, C]`` and ``[1, N*H, W, C]`` are the same bytes. This
rewrite puts the batch into the rows of one image (``Transpose``, ``Reshape``,
``Transpose``) around every run of ops that treat pixels independently (1x1
convolutions, ``Clip``/``Relu``/``Identity``, residual ``Add``s, and depthwise
convolutions on a 1x1 map, whose only live tap is the centre one) and takes it back out
before the next op that looks at neighbouring pixels. ONNX Runtime's layout transform
moves the convolutions to channels-last and cancels the transposes, so what remains is
two ``Reshape``s (views, no copy) per run::

    model = fold_batch_into_rows(model)   # same outputs, to float rounding

A QDQ model (a quantization-aware-trained graph's export, ``exporter/qat.py``) is folded
where it is quantized: per-tensor ``QuantizeLinear`` runs on the twin like ``Clip``, an
activation's ``DequantizeLinear`` is written where a reader needs it, on the twin for the
ops that run on it and on the batch-first tensor for the others, so the ``Reshape`` nodes
move uint8 tensors and every ``DequantizeLinear -> op -> QuantizeLinear`` group ONNX
Runtime fuses into an integer kernel stays whole; weights behind a ``DequantizeLinear``
are read through it (a centre tap is cut from the int8 weight, same scales).

The numbers are unchanged: each output pixel is computed from the same inputs. Only maps
of at most ``max_pixels`` pixels are folded (default 4, 2x2 and 1x1): larger ones already
give each image's GEMM enough rows, while every fold adds two ``Reshape`` nodes to each
call. On MobileNetV2 (CIFAR) with ONNX Runtime 1.31, folding every map gained nothing over
folding the 2x2 and 1x1 ones at batch 32 and cost 6% at batch 1 (bench_precision).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

ROWS = ":rows"  # suffix of a tensor's batch-in-rows twin
ELEMENTWISE = ("Clip", "Relu", "Identity", "QuantizeLinear")


def fold_batch_into_rows(model: onnx.ModelProto, max_pixels: Optional[int] = 4) -> onnx.ModelProto:
    """``model`` with its pixel-wise runs on maps of at most ``max_pixels`` pixels (None: any)
    computed on the batch laid out as one image (a new model; needs static channel and
    spatial sizes, which shape inference finds)."""
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in model.graph.node
           for a in n.attribute):
        return model  # subgraphs read outer tensors by name: left as they are
    model = shape_inference.infer_shapes(model)
    graph = model.graph
    rewrite = _Rewrite(graph, max_pixels)
    for node in graph.node:
        rewrite.visit(node)
    for output in graph.output:
        rewrite.unfold(output.name)
    read = {name for node in rewrite.nodes for name in node.input} | {o.name for o in graph.output}
    del graph.node[:]  # less the weights' dequantizers left unread (a centre tap reads its own)
    graph.node.extend(n for n in rewrite.nodes if n.output[0] not in rewrite.dequantized or n.output[0] in read)
    used = {name for node in graph.node for name in node.input} | {i.name for i in graph.input}
    kept = [t for t in list(graph.initializer) + rewrite.added if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del graph.value_info[:]
    return model


class _Rewrite:
    def __init__(self, graph: onnx.GraphProto, max_pixels: Optional[int]):
        self.max_pixels = max_pixels
        self.shapes = {}
        for v in list(graph.value_info) + list(graph.input) + list(graph.output):
            self.shapes[v.name] = [d.dim_value if d.HasField("dim_value") else None
                                   for d in v.type.tensor_type.shape.dim]
        self.weights = {t.name: t for t in graph.initializer}
        # a weight stored quantized: the DequantizeLinear output -> that node
        self.dequantized = {n.output[0]: n for n in graph.node
                            if n.op_type == "DequantizeLinear" and n.input[0] in self.weights}
        self.deferred = {}  # activation DequantizeLinear output -> the node, written where read
        self.written = set()  # the deferred outputs written batch first
        self.nodes, self.added = [], []
        self.twin = {}  # tensor -> its batch-in-rows twin
        self.pending = set()  # tensors made as twins only: unfolded when something else reads them

    def image(self, name: str) -> Optional[tuple]:
        """(C, H, W) of a 4-D activation with static C, H and W, on a map small enough to fold."""
        s = self.shapes.get(name)
        if s is None or len(s) != 4 or None in s[1:] or name in self.weights or name in self.dequantized:
            return None
        if self.max_pixels is not None and s[2] * s[3] > self.max_pixels:
            return None
        return tuple(s[1:])

    def weight(self, name: str) -> Optional[onnx.TensorProto]:
        """The constant weight ``name`` is, stored as it is or quantized."""
        return self.weights[self.dequantized[name].input[0]] if name in self.dequantized else self.weights.get(name)

    def visit(self, node: onnx.NodeProto) -> None:
        if self.per_tensor_dequantize(node):
            self.deferred[node.output[0]] = node
            return
        kind = self.kind(node)
        if kind is None:
            for name in node.input:
                self.unfold(name)
            self.nodes.append(node)
            return
        if kind == "centre":
            node = self.centre_tap(node)
        inputs = list(node.input)
        folded = (0, 1) if node.op_type == "Add" else (0,)
        for i, name in enumerate(inputs):
            if i in folded:
                inputs[i] = self.fold(name)
            else:  # weights, scales and bounds are read as they are
                self.unfold(name)
        twin = helper.make_node(node.op_type, inputs, [node.output[0] + ROWS],
                                name=node.name + ROWS if node.name else "")
        twin.attribute.extend(node.attribute)
        self.nodes.append(twin)
        self.twin[node.output[0]] = twin.output[0]
        self.pending.add(node.output[0])

    def kind(self, node: onnx.NodeProto) -> Optional[str]:
        """How ``node`` runs on the batch in rows: "pointwise", "centre" (a depthwise conv
        on a 1x1 map), "elementwise", or None (it stays as it is)."""
        if len(node.output) != 1 or not self.image(node.output[0]):
            return None
        if (node.op_type == "Conv" and len(node.input) > 1 and self.weight(node.input[1]) is not None
                and self.image(node.input[0])):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            kernel = list(self.weight(node.input[1]).dims[2:])
            if (kernel == [1, 1] and attrs.get("group", 1) == 1 and not any(attrs.get("pads", [0]))
                    and all(s == 1 for s in attrs.get("strides", [1, 1]))):
                return "pointwise"
            return "centre" if self.centre_only(node, attrs, kernel) else None
        if node.op_type in ELEMENTWISE and node.input[0] in self.twin and self.per_tensor(node):
            return "elementwise"
        if (node.op_type == "Add" and len(node.input) == 2 and self.image(node.input[0])
                and self.image(node.input[0]) == self.image(node.input[1]) and set(node.input) & set(self.twin)):
            return "elementwise"
        return None

    def per_tensor(self, node: onnx.NodeProto) -> bool:
        """Not a quantizer, or one with a scalar scale (a per-channel one has a channel axis)."""
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            return True
        scale = self.weights.get(node.input[1])
        return scale is not None and all(d == 1 for d in scale.dims)

    def per_tensor_dequantize(self, node: onnx.NodeProto) -> bool:
        """An activation's per-tensor DequantizeLinear on a map small enough to fold."""
        return (node.op_type == "DequantizeLinear" and node.input[0] not in self.weights and self.per_tensor(node)
                and self.image(node.output[0]) is not None)

    def centre_only(self, node, attrs: dict, kernel: list) -> bool:
        """A depthwise conv from a 1x1 map to a 1x1 map, symmetric padding: the only tap
        that meets the input is the centre one."""
        c, h, w = self.image(node.input[0])
        weight = self.weight(node.input[1])
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        return ((h, w) == (1, 1) and self.image(node.output[0])[1:] == (1, 1) and len(kernel) == 2
                and attrs.get("group", 1) == c == weight.dims[0] and weight.dims[1] == 1
                and all(d == 1 for d in attrs.get("dilations", [1, 1])) and pads[:2] == pads[2:]
                and pads[0] < kernel[0] and pads[1] < kernel[1] and kernel[0] - 1 == 2 * pads[0]
                and kernel[1] - 1 == 2 * pads[1])

    def centre_tap(self, node: onnx.NodeProto) -> onnx.NodeProto:
        """The depthwise conv as a 1x1 depthwise conv with the centre tap of its weight."""
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        top, left = list(attrs.get("pads", [0, 0]))[:2]
        quantizer = self.dequantized.get(node.input[1])
        stored = quantizer.input[0] if quantizer else node.input[1]
        name = stored + ":centre"
        if name not in self.weights:
            array = numpy_helper.to_array(self.weights[stored])[:, :, top:top + 1, left:left + 1]
            self.weights[name] = numpy_helper.from_array(np.ascontiguousarray(array), name)
            self.added.append(self.weights[name])
            if quantizer:  # the cut int8 weight, dequantized with the same scales
                dequantize = helper.make_node("DequantizeLinear", [name] + list(quantizer.input[1:]),
                                              [name + ":dequantized"], name=name + ":dequantize")
                dequantize.attribute.extend(quantizer.attribute)
                self.nodes.append(dequantize)
        if quantizer:
            name += ":dequantized"
        return helper.make_node("Conv", [node.input[0], name] + list(node.input[2:]), list(node.output),
                                name=node.name, group=int(attrs["group"]), kernel_shape=[1, 1])

    def fold(self, name: str) -> str:
        """The batch-in-rows twin of ``name`` (made here if there is none yet)."""
        if name not in self.twin and name in self.deferred:  # dequantized from the quantized twin
            node = self.deferred[name]
            twin = helper.make_node("DequantizeLinear", [self.fold(node.input[0])] + list(node.input[1:]),
                                    [name + ROWS], name=node.name + ROWS if node.name else "")
            twin.attribute.extend(node.attribute)
            self.nodes.append(twin)
            self.twin[name] = twin.output[0]
        elif name not in self.twin:
            c, h, w = self.image(name)
            self.reshape(name, name + ROWS, [1, -1, w, c])
            self.twin[name] = name + ROWS
        return self.twin[name]

    def unfold(self, name: str) -> None:
        """Make ``name`` itself (batch first) from its twin, where only the twin exists."""
        if name in self.deferred:  # dequantized where it is read, from the batch-first quantized tensor
            if name not in self.written:
                self.written.add(name)
                self.unfold(self.deferred[name].input[0])
                self.nodes.append(self.deferred[name])
        elif name in self.pending:
            self.pending.discard(name)
            c, h, w = self.image(name)
            self.reshape(self.twin[name], name, [-1, h, w, c])

    def reshape(self, source: str, target: str, nhwc: list) -> None:
        """``target = source`` viewed with channels-last shape ``nhwc`` (NCHW in and out)."""
        shape = target + ":shape"
        self.added.append(numpy_helper.from_array(np.array(nhwc, np.int64), shape))
        self.nodes += [helper.make_node("Transpose", [source], [target + ":nhwc_in"], perm=[0, 2, 3, 1]),
                       helper.make_node("Reshape", [target + ":nhwc_in", shape], [target + ":nhwc"]),
                       helper.make_node("Transpose", [target + ":nhwc"], [target], perm=[0, 3, 1, 2])]
