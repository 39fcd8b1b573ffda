"""Activations that a fused Gemm or Conv can absorb, as they appear after a value ``y``."""

from __future__ import annotations

import numpy as np

from flowserve.exporter.passes.export_graph import ExportGraph

SIMPLE = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid"}


def _scalar(g: ExportGraph, node, y: str):
    """The scalar constant ``node`` combines with ``y``, or None."""
    if len(node.inputs) != 2:
        return None
    other = node.inputs[1] if node.inputs[0] == y else node.inputs[0]
    if not g.is_const(other) or g.consts[other].size != 1:
        return None
    return float(np.asarray(g.consts[other]).ravel()[0])


def _clip(g: ExportGraph, node, y: str):
    """``maximum(y, lo)`` (then ``minimum(., hi)``): relu, relu6 or a clip; nodes and name."""
    lo = _scalar(g, node, y)
    if lo is None:
        return None
    out = node.outputs[0]
    if g.single_use(out):
        (nxt,) = g.users(out)
        hi = _scalar(g, nxt, out) if nxt.op == "minimum" else None
        if hi is not None:
            return [node, nxt], f"clip:{lo:g}:{hi:g}"
    return ([node], "relu") if lo == 0.0 else None


def activation_after(g: ExportGraph, y: str):
    """(nodes, act name) when ``y``'s only user starts an activation a fused kernel absorbs:
    relu, tanh, sigmoid, ``clip:lo:hi`` (relu6 is ``clip:0:6``), gelu, gelu_tanh, silu."""
    if not g.single_use(y):
        return None
    (user,) = g.users(y)
    if user.op in SIMPLE:
        return [user], SIMPLE[user.op]
    if user.op == "maximum":
        return _clip(g, user, y)
    if user.op == "fused.Gelu":
        return [user], "gelu_tanh" if user.attrs.get("approximate") == "tanh" else "gelu"
    if user.op == "fused.SiLU":
        return [user], "silu"
    return None


def clip_bounds(act: str) -> tuple[float, float]:
    _, lo, hi = act.split(":")
    return float(lo), float(hi)
