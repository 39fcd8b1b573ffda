"""Emitter of ``fused.Conv``: Conv (+ folded BatchNorm) + bias (+ residual add) + activation.

With ``residual=True`` the node's inputs are ``X, W, B, Z`` and it computes
``act(conv(X, W) + B + Z)``: ONNX Runtime's ``FusedConv`` with ``Z`` (onnxruntime target),
or a function whose body is ``Conv``, ``Add`` and the activation (portable)."""

from __future__ import annotations

from flowserve.exporter.functions import call_function
from flowserve.exporter.fused import activation, emitter, ort_activation
from flowserve.exporter.passes.act_match import clip_bounds
from flowserve.onnx_backend.versions import MS_DOMAIN

FUSED_CONV_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}


def conv_attrs(node, ctx) -> dict:
    a = node.attrs
    kernel = list(ctx.meta(node.inputs[1]).shape[2:])
    return dict(kernel_shape=kernel, strides=list(a["stride"]), pads=list(a["pads"]),
                dilations=list(a["dilation"]), group=int(a["groups"]))


def _name(attrs: dict, act: str, residual: bool) -> str:
    k = "x".join(map(str, attrs["kernel_shape"]))
    s = "x".join(map(str, attrs["strides"]))
    p = "_".join(map(str, attrs["pads"]))
    d = "x".join(map(str, attrs["dilations"]))
    tail = ("add_" if residual else "") + (act or "linear").replace(":", "_").replace(".", "p")
    return f"Conv_k{k}_s{s}_p{p}_d{d}_g{attrs['group']}_{tail}"


def _conv_add(fb, xs: list, attrs: dict, residual: bool) -> str:
    """``conv(X, W, B)``, plus ``Z`` (the last of ``xs``) when ``residual``."""
    if not residual:
        return fb.op1("Conv", list(xs), **attrs)
    return fb.op1("Add", [fb.op1("Conv", list(xs[:-1]), **attrs), xs[-1]])


def _body(attrs: dict, act: str, residual: bool):
    def body(fb, *xs):
        return [activation(fb, _conv_add(fb, list(xs), attrs, residual), act)]

    return body


@emitter("Conv")
def emit_conv(b, node, ctx, target: str) -> None:
    attrs, act = conv_attrs(node, ctx), node.attrs.get("act")
    residual = bool(node.attrs.get("residual"))
    if act is None and not residual:
        b.op("Conv", node.inputs, node.outputs, **attrs)
    elif target == "portable":
        call_function(b, _name(attrs, act, residual), _body(attrs, act, residual), node.inputs, node.outputs)
    elif act in FUSED_CONV_ACTIVATIONS:
        b.op("FusedConv", node.inputs, node.outputs, domain=MS_DOMAIN,
             activation=FUSED_CONV_ACTIVATIONS[act], **attrs)
    elif act is not None and act.startswith("clip:"):
        b.op("FusedConv", node.inputs, node.outputs, domain=MS_DOMAIN, activation="Clip",
             activation_params=list(clip_bounds(act)), **attrs)
    else:
        ort_activation(b, _conv_add(b, node.inputs, attrs, residual), act, node.outputs[0])
