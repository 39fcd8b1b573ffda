"""Emitters of ``fused.Gemm`` (2-D input) and ``fused.MatMulBias`` (any rank).

Node inputs: ``[x, weight, bias?]``; attrs ``trans_b`` (the weight is stored
``(out, in)`` as ``nn.Linear`` keeps it), ``act`` (None, relu, tanh, sigmoid, gelu,
gelu_tanh, silu).
"""

from __future__ import annotations

from flowserve.exporter.functions import call_function
from flowserve.exporter.fused import ORT_ACTIVATIONS, activation, emitter, ort_activation, variant
from flowserve.onnx_backend.versions import MS_DOMAIN


def _gemm_body(trans_b: int, act):
    def body(fb, *xs):
        return [activation(fb, fb.op1("Gemm", list(xs), transB=trans_b), act)]

    return body


def _matmul_body(trans_b: int, act, has_bias: bool):
    def body(fb, x, w, *bias):
        if trans_b:
            w = fb.op1("Transpose", [w], perm=[1, 0])
        y = fb.op1("MatMul", [x, w])
        if has_bias:
            y = fb.op1("Add", [y, bias[0]])
        return [activation(fb, y, act)]

    return body


def _ort_bias_act(b, y: str, bias: str | None, act, out: str) -> None:
    """``act(y + bias)`` with ONNX Runtime's fused bias-activation kernels."""
    if act == "gelu" and bias is not None:
        b.op("BiasGelu", [y, bias], [out], domain=MS_DOMAIN)
        return
    if act == "gelu_tanh":
        b.op("FastGelu", [y] + ([bias] if bias else []), [out], domain=MS_DOMAIN)
        return
    if act is None and bias is not None:
        b.op("Add", [y, bias], [out])
        return
    ort_activation(b, b.op1("Add", [y, bias]) if bias is not None else y, act, out)


@emitter("Gemm")
def emit_gemm(b, node, ctx, target: str) -> None:
    trans_b, act = node.attrs["trans_b"], node.attrs.get("act")
    if act is None:
        b.op("Gemm", node.inputs, node.outputs, transB=trans_b)
    elif target == "portable":
        call_function(b, variant("Gemm", act, "tB" if trans_b else ""), _gemm_body(trans_b, act),
                      node.inputs, node.outputs)
    elif act in ORT_ACTIVATIONS:
        b.op("FusedGemm", node.inputs, node.outputs, domain=MS_DOMAIN, transB=trans_b,
             activation=ORT_ACTIVATIONS[act])
    else:
        x, w = node.inputs[:2]
        y = b.op1("FusedMatMul", [x, w], domain=MS_DOMAIN, transB=trans_b)
        _ort_bias_act(b, y, node.inputs[2] if len(node.inputs) > 2 else None, act, node.outputs[0])


@emitter("MatMulBias")
def emit_matmul_bias(b, node, ctx, target: str) -> None:
    trans_b, act = node.attrs["trans_b"], node.attrs.get("act")
    has_bias = len(node.inputs) > 2
    if target == "portable":
        name = variant("MatMul", act, "tB" if trans_b else "", "bias" if has_bias else "")
        call_function(b, name, _matmul_body(trans_b, act, has_bias), node.inputs, node.outputs)
        return
    x, w = node.inputs[:2]
    y = b.op1("FusedMatMul", [x, w], domain=MS_DOMAIN, transB=trans_b)
    _ort_bias_act(b, y, node.inputs[2] if has_bias else None, act, node.outputs[0])
