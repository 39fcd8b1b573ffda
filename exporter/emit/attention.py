"""Emitters of ``fused.Attention`` and ``fused.MultiHeadAttention``."""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.exporter.functions import call_function
from flowserve.exporter.fused import emitter
from flowserve.onnx_backend.versions import MS_DOMAIN


def _tag(scale: float) -> str:
    return f"{scale:.6g}".replace(".", "p").replace("-", "m").replace("+", "")


def attention_core(fb, q, kt, v, bias, scale: float, np_dtype) -> str:
    """``softmax(q @ kt * scale + bias) @ v`` in plain ONNX."""
    scores = fb.op1("Mul", [fb.op1("MatMul", [q, kt]), fb.const(scale, np_dtype)])
    if bias is not None:
        scores = fb.op1("Add", [scores, bias])
    return fb.op1("MatMul", [fb.op1("Softmax", [scores], axis=-1), v])


def _attention_body(a: dict, rank: int, np_dtype):
    def body(fb, q, k, v, *bias):
        kt = k if a["k_transposed"] else fb.op1("Transpose", [k], perm=list(range(rank - 2)) + [rank - 1, rank - 2])
        return [attention_core(fb, q, kt, v, bias[0] if bias else None, a["scale"], np_dtype)]

    return body


def _mha_body(a: dict, np_dtype):
    heads = a["heads"]

    def split(fb, t, perm):
        return fb.op1("Transpose", [fb.op1("Reshape", [t, fb.const([0, 0, heads, -1])])], perm=perm)

    def body(fb, q, k, v, *bias):
        core = attention_core(fb, split(fb, q, [0, 2, 1, 3]), split(fb, k, [0, 2, 3, 1]), split(fb, v, [0, 2, 1, 3]),
                              bias[0] if bias else None, a["scale"], np_dtype)
        return [fb.op1("Reshape", [fb.op1("Transpose", [core], perm=[0, 2, 1, 3]), fb.const([0, 0, -1])])]

    return body


def _np_dtype(node, ctx):
    return dtypes.from_name(ctx.meta(node.outputs[0]).dtype).np


@emitter("Attention")
def emit_attention(b, node, ctx, target: str) -> None:
    a = node.attrs
    rank = len(ctx.meta(node.outputs[0]).shape)
    name = f"Attention_{rank}d_s{_tag(a['scale'])}" + ("_kT" if a["k_transposed"] else "") + \
        ("_bias" if a["has_bias"] else "")
    call_function(b, name, _attention_body(a, rank, _np_dtype(node, ctx)), node.inputs, node.outputs)


@emitter("MultiHeadAttention")
def emit_multi_head_attention(b, node, ctx, target: str) -> None:
    a = node.attrs
    if target == "onnxruntime" and not a["has_bias"] and _np_dtype(node, ctx) == np.float32:
        b.op("MultiHeadAttention", node.inputs[:3], node.outputs, domain=MS_DOMAIN, num_heads=int(a["heads"]),
             scale=float(a["scale"]))
        return
    name = f"MultiHeadAttention_h{a['heads']}_s{_tag(a['scale'])}" + ("_bias" if a["has_bias"] else "")
    call_function(b, name, _mha_body(a, _np_dtype(node, ctx)), node.inputs, node.outputs)
