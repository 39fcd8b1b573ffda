"""Emitters of ``fused.Gelu`` (exact and tanh), ``fused.SiLU`` and ``fused.LayerNorm``."""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.exporter.functions import call_function
from flowserve.exporter.fused import activation, emitter
from flowserve.onnx_backend.versions import MS_DOMAIN


def _act_body(act: str):
    def body(fb, x):
        return [activation(fb, x, act)]

    return body


@emitter("Gelu")
def emit_gelu(b, node, ctx, target: str) -> None:
    tanh = node.attrs.get("approximate") == "tanh"
    if target == "onnxruntime":
        b.op("FastGelu" if tanh else "Gelu", node.inputs, node.outputs, domain=MS_DOMAIN)
        return
    act = "gelu_tanh" if tanh else "gelu"
    call_function(b, "GeluTanh" if tanh else "Gelu", _act_body(act), node.inputs, node.outputs)


@emitter("SiLU")
def emit_silu(b, node, ctx, target: str) -> None:
    if target == "onnxruntime":
        b.op("QuickGelu", node.inputs, node.outputs, domain=MS_DOMAIN, alpha=1.0)
        return
    call_function(b, "SiLU", _act_body("silu"), node.inputs, node.outputs)


def _layernorm_inputs(b, node, ctx, first: int) -> list:
    """[scale, bias?] for LayerNormalization: a missing weight is ones."""
    a = node.attrs
    rest = node.inputs[first:]
    scale = rest.pop(0) if a["has_weight"] else None
    if scale is None:
        v = ctx.meta(node.outputs[0])
        scale = b.const(np.ones(v.shape[-1]), dtypes.from_name(v.dtype).np)
    return [scale] + (rest[:1] if a["has_bias"] else [])


def _skip_layernorm_body(eps: float):
    def body(fb, x, skip, *affine):
        return [fb.op1("LayerNormalization", [fb.op1("Add", [x, skip])] + list(affine), axis=-1, epsilon=eps)]

    return body


@emitter("LayerNorm")
def emit_layernorm(b, node, ctx, target: str) -> None:
    a = node.attrs
    eps = float(a["epsilon"])
    if not a.get("skip"):
        b.op("LayerNormalization", [node.inputs[0]] + _layernorm_inputs(b, node, ctx, 1), node.outputs,
             axis=-1, epsilon=eps)
        return
    x, skip = node.inputs[:2]
    affine = _layernorm_inputs(b, node, ctx, 2)
    if target == "onnxruntime":
        b.op("SkipLayerNormalization", [x, skip] + affine, node.outputs, domain=MS_DOMAIN, epsilon=eps)
        return
    name = f"SkipLayerNorm_eps{eps:g}".replace(".", "p").replace("-", "m") + ("_bias" if a["has_bias"] else "")
    call_function(b, name, _skip_layernorm_body(eps),
                  [x, skip] + affine, node.outputs)
