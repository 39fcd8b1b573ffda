"""Emitter of ``fused.Conv``: Conv (+ folded BatchNorm) + bias + activation."""

from __future__ import annotations

from flowserve.exporter.fused import activation, emitter, ort_activation
from flowserve.exporter.functions import call_function
from flowserve.exporter.passes.act_match import clip_bounds
from flowserve.exporter.versions import MS_DOMAIN

FUSED_CONV_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}


def conv_attrs(node, ctx) -> dict:
    a = node.attrs
    kernel = list(ctx.meta(node.inputs[1]).shape[2:])
    return dict(kernel_shape=kernel, strides=list(a["stride"]), pads=list(a["pads"]),
                dilations=list(a["dilation"]), group=int(a["groups"]))


def _name(attrs: dict, act: str) -> str:
    k = "x".join(map(str, attrs["kernel_shape"]))
    s = "x".join(map(str, attrs["strides"]))
    p = "_".join(map(str, attrs["pads"]))
    d = "x".join(map(str, attrs["dilations"]))
    return f"Conv_k{k}_s{s}_p{p}_d{d}_g{attrs['group']}_{act.replace(':', '_').replace('.', 'p')}"


def _body(attrs: dict, act: str):
    def body(fb, *xs):
        return [activation(fb, fb.op1("Conv", list(xs), **attrs), act)]

    return body


@emitter("Conv")
def emit_conv(b, node, ctx, target: str) -> None:
    attrs, act = conv_attrs(node, ctx), node.attrs.get("act")
    if act is None:
        b.op("Conv", node.inputs, node.outputs, **attrs)
    elif target == "portable":
        call_function(b, _name(attrs, act), _body(attrs, act), node.inputs, node.outputs)
    elif act in FUSED_CONV_ACTIVATIONS:
        b.op("FusedConv", node.inputs, node.outputs, domain=MS_DOMAIN,
             activation=FUSED_CONV_ACTIVATIONS[act], **attrs)
    elif act.startswith("clip:"):
        b.op("FusedConv", node.inputs, node.outputs, domain=MS_DOMAIN, activation="Clip",
             activation_params=list(clip_bounds(act)), **attrs)
    else:
        ort_activation(b, b.op1("Conv", node.inputs, **attrs), act, node.outputs[0])
