"""ONNX forms of the attention nodes ``flowserve.ir.passes.attention`` makes.

``fused.MultiHeadAttention`` on ONNX Runtime is its ``com.microsoft.MultiHeadAttention``
kernel (``lower_ort_multi_head_attention``: one operator for the head split, the scaled
scores, the mask, the softmax, the values and the head merge); graph mode lowers its fused
nodes so, and the exporter's ``onnxruntime`` target too. The plain ``ai.onnx`` bodies
(``attention_body``, ``multi_head_body``) are what the exporter's portable target writes as
model-local functions, and what other engines (OpenVINO) run, graph mode leaving the
composite unfused there.
"""

from __future__ import annotations

from flowserve.onnx_backend.versions import MS_DOMAIN

BIAS_INPUT = 5  # MultiHeadAttention's inputs: q, k, v, projection bias, key padding mask, attention bias


def attention_core(fb, q: str, kt: str, v: str, bias: str | None, scale: float, np_dtype) -> str:
    """``softmax(q @ kt * scale + bias) @ v`` in plain ONNX."""
    scores = fb.op1("Mul", [fb.op1("MatMul", [q, kt]), fb.const(scale, np_dtype)])
    if bias is not None:
        scores = fb.op1("Add", [scores, bias])
    return fb.op1("MatMul", [fb.op1("Softmax", [scores], axis=-1), v])


def attention_body(attrs: dict, rank: int, np_dtype):
    """``body(fb, q, k, v[, bias]) -> [out]`` of ``fused.Attention`` over rank-``rank`` tensors."""

    def body(fb, q, k, v, *bias):
        swap = list(range(rank - 2)) + [rank - 1, rank - 2]
        kt = k if attrs["k_transposed"] else fb.op1("Transpose", [k], perm=swap)
        return [attention_core(fb, q, kt, v, bias[0] if bias else None, attrs["scale"], np_dtype)]

    return body


def multi_head_body(attrs: dict, np_dtype):
    """``body(fb, q, k, v[, bias]) -> [out]`` of ``fused.MultiHeadAttention`` on (n, L, E) tensors."""
    heads = attrs["heads"]

    def split(fb, t, perm):
        return fb.op1("Transpose", [fb.op1("Reshape", [t, fb.const([0, 0, heads, -1])])], perm=perm)

    def body(fb, q, k, v, *bias):
        core = attention_core(fb, split(fb, q, [0, 2, 1, 3]), split(fb, k, [0, 2, 3, 1]), split(fb, v, [0, 2, 1, 3]),
                              bias[0] if bias else None, attrs["scale"], np_dtype)
        return [fb.op1("Reshape", [fb.op1("Transpose", [core], perm=[0, 2, 1, 3]), fb.const([0, 0, -1])])]

    return body


def _attention_bias(b, node, ctx) -> str:
    """The scores' additive bias as the kernel takes it, (n or 1, heads or 1, L, S): as it is
    where it has that form, else broadcast to (.., .., L, S) with L and S read at run time."""
    q, k, bias = node.inputs[0], node.inputs[1], node.inputs[3]
    shape = tuple(ctx.meta(bias).shape)
    if len(shape) == 4 and shape[2:] == (ctx.meta(q).shape[1], ctx.meta(k).shape[1]):
        return bias
    lengths = [b.op1("Shape", [q], start=1, end=2), b.op1("Shape", [k], start=1, end=2)]
    return b.op1("Expand", [bias, b.op1("Concat", [b.const([1, 1])] + lengths, axis=0)])


def lower_ort_multi_head_attention(b, node, ctx) -> None:
    """``fused.MultiHeadAttention`` as ONNX Runtime's ``com.microsoft.MultiHeadAttention``
    (float32 or float16; a bias is its ``attention_bias`` input)."""
    inputs = list(node.inputs[:3])
    if node.attrs["has_bias"]:
        inputs += [""] * (BIAS_INPUT - 3) + [_attention_bias(b, node, ctx)]
    b.op("MultiHeadAttention", inputs, node.outputs, domain=MS_DOMAIN, num_heads=int(node.attrs["heads"]),
         scale=float(node.attrs["scale"]))
