"""int8 exports of quantization-aware-trained graphs (``flowserve.ao.quantization``).

A QAT graph's fake-quantizers lower to QuantizeLinear/DequantizeLinear with the scales and
zero points it learned (saved with its parameters), its weights as int8 initializers: its
float32 export already is the QDQ model ``--precision int8`` deploys, and needs no
calibration. What is left is the form ONNX Runtime fuses into integer kernels: each
``Conv``/``Gemm`` bias as int32 at scale ``input scale * weight scale`` behind a
``DequantizeLinear`` (as ``quantize_static`` writes it), and the batch laid out as one
image around the pointwise convolutions on small maps (``exporter/batch_rows.py``, as for
calibrated int8).

The model is held to the QAT graph's own outputs within one quantization step of each
output (the integer kernels round where the float fake-quantization rounded, but may land
on the neighbouring step where a value sits on a rounding boundary).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from flowserve.exporter.packed_attention import drop_unused_initializers

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def is_quantized(model: onnx.ModelProto) -> bool:
    """The model holds QDQ pairs: a QAT graph's export."""
    return any(n.op_type in QDQ_OPS and n.domain in ("", "ai.onnx") for n in model.graph.node)


def _dequantized(producers: dict, initializers: dict, name: str):
    """(node, scale array) when ``name`` comes out of a DequantizeLinear with a constant scale."""
    node = producers.get(name)
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in initializers:
        return None
    return node, numpy_helper.to_array(initializers[node.input[1]])


def output_steps(model: onnx.ModelProto) -> Optional[dict]:
    """Output name -> its quantization step, when every output comes out of a
    DequantizeLinear with a scalar scale; else None."""
    producers = {o: n for n in model.graph.node for o in n.output}
    initializers = {t.name: t for t in model.graph.initializer}
    steps = {}
    for output in model.graph.output:
        found = _dequantized(producers, initializers, output.name)
        if found is None or found[1].size != 1:
            return None
        steps[output.name] = float(found[1].reshape(()))
    return steps


def quantize_biases(model: onnx.ModelProto) -> onnx.ModelProto:
    """Each float bias of a ``Conv``/``Gemm`` whose input and weight are dequantized becomes
    int32 at ``input scale * weight scale`` behind a ``DequantizeLinear``."""
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    initializers = {t.name: t for t in graph.initializer}
    added, nodes = [], []
    for node in graph.node:
        if node.op_type in ("Conv", "Gemm") and len(node.input) == 3 and node.input[2] in initializers:
            x = _dequantized(producers, initializers, node.input[0])
            w = _dequantized(producers, initializers, node.input[1])
            bias = numpy_helper.to_array(initializers[node.input[2]])
            if x is not None and w is not None and x[1].size == 1 and w[1].size in (1, bias.size):
                scale = (x[1].reshape(()) * w[1].reshape(-1)).astype(np.float32)
                scale = np.broadcast_to(scale, bias.shape).copy() if w[1].size == 1 else scale
                quantized = np.round(bias.astype(np.float64) / scale).astype(np.int32)
                base = node.input[2]
                added += [numpy_helper.from_array(quantized, f"{base}_int32"),
                          numpy_helper.from_array(scale, f"{base}_int32_scale"),
                          numpy_helper.from_array(np.zeros(bias.shape, np.int32), f"{base}_int32_zero_point")]
                nodes.append(helper.make_node("DequantizeLinear", [f"{base}_int32", f"{base}_int32_scale",
                                                                   f"{base}_int32_zero_point"], [f"{base}_dq"],
                                              axis=0, name=f"{base}_dequantize"))
                node.input[2] = f"{base}_dq"
        nodes.append(node)
    graph.initializer.extend(added)
    del graph.node[:]
    graph.node.extend(nodes)
    drop_unused_initializers(graph)
    return model
