"""Conv + per-channel affine (bias, eval-mode BatchNorm) + activation -> one ``fused.Conv``.

After constant folding, ``conv2d(x, W, b)`` followed by eval-mode ``batch_norm`` traces to
``conv -> add(c1) -> mul(c2) -> add(c3)`` with constant per-channel ``c``s (shape ``(1, C, 1, 1)``).
Each per-channel ``add``/``sub``/``mul``/``div`` is folded into the weight and bias
(``W' = W * s``, ``b' = b * s + t``); an activation after them is absorbed.
"""

from __future__ import annotations

import numpy as np

from flowserve.exporter.passes import ExportGraph, FusedGroup, fused_node
from flowserve.exporter.passes.act_match import activation_after

AFFINE = ("add", "sub", "mul", "div")


def _per_channel(g: ExportGraph, node, y: str, channels: int, rank: int):
    """The constant (as a (C,) vector) that ``node`` combines with ``y`` per channel."""
    if node.op not in AFFINE or len(node.inputs) != 2 or node.inputs[0] != y and node.op in ("sub", "div"):
        return None
    other = node.inputs[1] if node.inputs[0] == y else node.inputs[0]
    if other == y or not g.is_const(other):
        return None
    c = np.asarray(g.consts[other])
    if c.size == 1 and c.ndim <= rank:
        return np.full(channels, c.ravel()[0], dtype=np.float64)
    shape = tuple(c.shape)
    full = (1, channels) + (1,) * (rank - 2)
    if c.size != channels or len(shape) > rank or shape != full[rank - len(shape):]:
        return None
    return c.astype(np.float64).ravel()


def _fold_affine(g: ExportGraph, conv, weight: np.ndarray):
    """Walk the per-channel affine chain after ``conv``: (nodes, W, b or None, last value)."""
    rank = len(g.ir.values[conv.outputs[0]].shape)
    channels = weight.shape[0]
    w, b, y, nodes = weight.astype(np.float64), None, conv.outputs[0], []
    while g.single_use(y):
        (user,) = g.users(y)
        c = _per_channel(g, user, y, channels, rank)
        if c is None:
            break
        bias = np.zeros(channels) if b is None else b
        if user.op in ("add", "sub"):
            b = bias + c if user.op == "add" else bias - c
        else:
            scale = c if user.op == "mul" else 1.0 / c
            w = w * scale.reshape((channels,) + (1,) * (w.ndim - 1))
            b = None if b is None else b * scale
        nodes.append(user)
        y = user.outputs[0]
    return nodes, w, b, y


def fuse_one(g: ExportGraph, conv) -> bool:
    x, wname = conv.inputs
    if not g.is_const(wname):
        return False
    weight = np.asarray(g.consts[wname])
    affine, w, b, y = _fold_affine(g, conv, weight)
    act = activation_after(g, y)
    nodes = [conv] + affine + (act[0] if act else [])
    if len(nodes) == 1:
        return False
    if act is not None:
        y = act[0][-1].outputs[0]
    inputs = [x, wname]
    scales = any(n.op in ("mul", "div") for n in affine)
    if scales:
        inputs[1] = g.add_const(f"{wname}:folded", w.astype(weight.dtype))
    if b is not None:
        inputs.append(g.add_const(f"{conv.outputs[0]}:bias", b.astype(weight.dtype)))
    attrs = {**conv.attrs, "act": act[1] if act else None}
    detail = ", ".join(p for p in ("bias" if b is not None else "", "batchnorm folded" if scales else "",
                                   act[1] if act else "") if p)
    group = FusedGroup("Conv", conv.scope, [n.op for n in nodes], y, detail)
    g.replace(nodes, fused_node("Conv", inputs, [y], attrs, conv), group)
    return True


def fuse_conv(g: ExportGraph) -> int:
    count = 0
    for node in list(g.ir.nodes):
        if node.op == "conv" and node in g.ir.nodes and fuse_one(g, node):
            count += 1
    return count
