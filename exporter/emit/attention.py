"""Emitters of ``fused.Attention`` and ``fused.MultiHeadAttention``: the ONNX backend's
attention lowerings (``flowserve.onnx_backend.lowering.attention``, which graph mode uses
too), the plain bodies written as model-local functions."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.exporter.functions import call_function
from flowserve.exporter.fused import emitter
from flowserve.ir.passes.attention import kernel_takes
from flowserve.onnx_backend.lowering.attention import (attention_body, lower_ort_multi_head_attention,
                                                       multi_head_body)


def _tag(scale: float) -> str:
    return f"{scale:.6g}".replace(".", "p").replace("-", "m").replace("+", "")


def _np_dtype(node, ctx):
    return dtypes.from_name(ctx.meta(node.outputs[0]).dtype).np


@emitter("Attention")
def emit_attention(b, node, ctx, target: str) -> None:
    a = node.attrs
    rank = len(ctx.meta(node.outputs[0]).shape)
    name = f"Attention_{rank}d_s{_tag(a['scale'])}" + ("_kT" if a["k_transposed"] else "") + \
        ("_bias" if a["has_bias"] else "")
    call_function(b, name, attention_body(a, rank, _np_dtype(node, ctx)), node.inputs, node.outputs)


@emitter("MultiHeadAttention")
def emit_multi_head_attention(b, node, ctx, target: str) -> None:
    a = node.attrs
    if target == "onnxruntime" and kernel_takes([ctx.meta(i) for i in node.inputs], ctx.meta(node.outputs[0]), a):
        lower_ort_multi_head_attention(b, node, ctx)
        return
    name = f"MultiHeadAttention_h{a['heads']}_s{_tag(a['scale'])}" + ("_bias" if a["has_bias"] else "")
    call_function(b, name, multi_head_body(a, _np_dtype(node, ctx)), node.inputs, node.outputs)
