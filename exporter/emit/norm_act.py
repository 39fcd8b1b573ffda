"""Emitters of the activation groups: ``fused.Gelu`` (exact and tanh) and ``fused.SiLU``."""

from __future__ import annotations

from flowserve.exporter.fused import activation, emitter
from flowserve.exporter.functions import call_function
from flowserve.exporter.versions import MS_DOMAIN


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
