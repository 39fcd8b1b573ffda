"""Attention recognised in the IR: scaled dot products, softmax, values -> one
``fused.Attention`` node; with the head split and merge around it -> ``fused.MultiHeadAttention``.

The core pattern is ``softmax(q @ kT * scale [+ bias], -1) @ v`` (the scale may also
multiply ``q`` first, or be a division); ``kT`` is ``permute(k)`` swapping the last two
dims. When ``q``, ``k``, ``v`` are each ``permute(reshape(t, (n, L, heads, d)), [0, 2, 1, 3])``
of 3-D tensors and the result is merged back the same way, the whole block becomes one
multi-head attention on the 3-D tensors (ONNX Runtime's ``MultiHeadAttention``). This is
what ``flowserve.ops.attention`` writes, in inference (dropout, where it runs, sits between
the softmax and the values, and the pattern does not match).

One definition for both users: the exporter's attention pass (``flowserve.exporter.passes.
attention``) reports and emits the matches; graph mode (``config.allow_fused_attention``)
replaces the multi-head matches of inference graphs on ONNX Runtime by
``fused.MultiHeadAttention`` nodes (``flowserve.ir.passes.fuse_attention``), which the ONNX
backend lowers to ``com.microsoft.MultiHeadAttention`` (``flowserve.onnx_backend.lowering.attention``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flowserve.ir.graph import Node, Value
from flowserve.ir.passes.pattern import PatternGraph

ATTENTION = "fused.Attention"
MULTI_HEAD_ATTENTION = "fused.MultiHeadAttention"
FUSED_DTYPES = ("float32", "float16")  # what ONNX Runtime's MultiHeadAttention computes


@dataclass
class AttentionMatch:
    """One attention block: its kind (``"Attention"`` or ``"MultiHeadAttention"``), the fused
    node's inputs (q, k, v[, bias]) and attributes, the nodes it replaces, its output."""

    kind: str
    inputs: list
    attrs: dict
    nodes: list
    output: str

    def node(self, like: Node) -> Node:
        """The fused node (op ``fused.<kind>``), in ``like``'s scope."""
        return Node(f"fused.{self.kind}", list(self.inputs), [self.output], dict(self.attrs), like.scope, like.loc)

    def detail(self) -> str:
        heads = f", heads={self.attrs['heads']}" if "heads" in self.attrs else ""
        return f"scale={self.attrs['scale']:.4g}" + heads + (", mask" if self.attrs["has_bias"] else "")


def _scalar(g: PatternGraph, name: str):
    return float(np.asarray(g.consts[name]).ravel()[0]) if g.is_const(name) and g.consts[name].size == 1 else None


def _scaled(g: PatternGraph, name: str):
    """(value, scale, node) for ``value * c`` or ``value / c``; else (name, 1.0, None)."""
    node = g.producer(name)
    if node is not None and node.op in ("mul", "div") and g.single_use(name):
        for i, j in ((0, 1), (1, 0)):
            c = _scalar(g, node.inputs[j])
            if c is not None and (node.op == "mul" or i == 0):
                return node.inputs[i], (c if node.op == "mul" else 1.0 / c), node
    return name, 1.0, None


def _scores(g: PatternGraph, name: str):
    """(q, k, scale, k given as is, nodes) for ``(q*s) @ kT * s'``."""
    inner, s_out, scale_node = _scaled(g, name)
    mm = g.producer(inner)
    if mm is None or mm.op != "matmul" or not g.single_use(inner):
        return None
    q, s_in, q_scale = _scaled(g, mm.inputs[0])
    kt = mm.inputs[1]
    perm = g.producer(kt)
    nd = len(g.ir.values[kt].shape)
    swap = list(range(nd - 2)) + [nd - 1, nd - 2]
    k, k_node = (perm.inputs[0], perm) if perm is not None and perm.op == "permute" and \
        perm.attrs["perm"] == swap and g.single_use(kt) else (kt, None)
    nodes = [n for n in (q_scale, k_node, mm, scale_node) if n is not None]
    return q, k, s_in * s_out, k_node is None, nodes


def match_attention(g: PatternGraph, softmax: Node) -> AttentionMatch | None:
    """The scaled-dot-product attention around ``softmax`` (kind ``"Attention"``)."""
    nd = len(g.ir.values[softmax.outputs[0]].shape)
    if softmax.attrs["axis"] not in (-1, nd - 1) or nd < 2 or not g.single_use(softmax.outputs[0]):
        return None
    (pv,) = g.users(softmax.outputs[0])
    if pv.op != "matmul" or pv.inputs[0] != softmax.outputs[0]:
        return None
    s_in, bias, bias_node = softmax.inputs[0], None, None
    add = g.producer(s_in)
    if add is not None and add.op == "add" and g.single_use(s_in):
        for i in (0, 1):
            found = _scores(g, add.inputs[i])
            if found is not None:
                bias, bias_node, scores = add.inputs[1 - i], add, found
                break
    if bias_node is None:
        scores = _scores(g, s_in)
    if scores is None:
        return None
    q, k, scale, k_transposed, nodes = scores
    nodes = nodes + [n for n in (bias_node, softmax, pv) if n is not None]
    inputs = [q, k, pv.inputs[1]] + ([bias] if bias is not None else [])
    attrs = {"scale": scale, "k_transposed": k_transposed, "has_bias": bias is not None}
    return AttentionMatch("Attention", inputs, attrs, nodes, pv.outputs[0])


def _split_heads(g: PatternGraph, name: str):
    """(3-D tensor, heads, [reshape, permute]) if ``name`` is its head split."""
    perm = g.producer(name)
    if perm is None or perm.op != "permute" or perm.attrs["perm"] != [0, 2, 1, 3] or not g.single_use(name):
        return None
    shaped = perm.inputs[0]
    rs = g.producer(shaped)
    if rs is None or rs.op != "reshape" or not g.single_use(shaped):
        return None
    src = g.ir.values[rs.inputs[0]].shape
    out = g.ir.values[shaped].shape
    if len(src) != 3 or len(out) != 4 or tuple(out[:2]) != tuple(src[:2]) or out[2] * out[3] != src[2]:
        return None
    return rs.inputs[0], out[2], [rs, perm]


def _merge_heads(g: PatternGraph, name: str):
    """([permute, reshape], output) if ``name`` (n, h, L, d) is merged back to (n, L, h*d)."""
    if not g.single_use(name):
        return None
    (perm,) = g.users(name)
    if perm.op != "permute" or perm.attrs["perm"] != [0, 2, 1, 3] or not g.single_use(perm.outputs[0]):
        return None
    (rs,) = g.users(perm.outputs[0])
    n, h, L, d = g.ir.values[name].shape
    if rs.op != "reshape" or tuple(g.ir.values[rs.outputs[0]].shape) != (n, L, h * d):
        return None
    return [perm, rs], rs.outputs[0]


def match_fused_attention(g: PatternGraph, softmax: Node) -> AttentionMatch | None:
    """The attention around ``softmax``: ``"MultiHeadAttention"`` on the 3-D tensors where the
    head split and merge around it match with one head count, else ``"Attention"``."""
    found = match_attention(g, softmax)
    if found is None or found.attrs["k_transposed"] or len(g.ir.values[found.output].shape) != 4:
        return found
    split = [_split_heads(g, i) for i in found.inputs[:3]]
    merge = _merge_heads(g, found.output)
    if not all(split) or merge is None or len({s[1] for s in split}) != 1:
        return found
    return AttentionMatch("MultiHeadAttention", [s[0] for s in split] + found.inputs[3:],
                          {**found.attrs, "heads": split[0][1]},
                          [n for s in split for n in s[2]] + found.nodes + merge[0], merge[1])


def kernel_takes(inputs: list[Value], output: Value, attrs: dict) -> bool:
    """Whether ONNX Runtime's ``MultiHeadAttention`` computes a ``fused.MultiHeadAttention``
    with these input and output values: q (n, L, E), k (n, S, E), v (n, S, Ev), one float
    dtype (float32 or float16) throughout, and a bias that broadcasts to the scores
    (n, heads, L, S) without widening them."""
    q, k, v = inputs[:3]
    float_types = {value.dtype for value in inputs + [output]}
    if float_types - set(FUSED_DTYPES) or len(float_types) != 1:
        return False
    if not q.shape[0] == k.shape[0] == v.shape[0] or k.shape[1] != v.shape[1] or q.shape[2] != k.shape[2]:
        return False
    if not attrs["has_bias"]:
        return True
    scores = (q.shape[0], attrs["heads"], q.shape[1], k.shape[1])
    bias = tuple(inputs[3].shape)
    return len(bias) <= 4 and all(b in (1, s) for b, s in zip(bias[::-1], scores[::-1]))
