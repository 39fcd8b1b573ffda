"""Conv + per-channel affine (bias, eval-mode BatchNorm) + activation -> one ``fused.Conv``.

After constant folding, ``conv2d(x, W, b)`` followed by eval-mode ``batch_norm`` traces to
``conv -> add(c1) -> mul(c2) -> add(c3)`` with constant per-channel ``c``s (shape ``(1, C, 1, 1)``).
Each per-channel ``add``/``sub``/``mul``/``div`` is folded into the weight and bias
(``W' = W * s``, ``b' = b * s + t``); an activation after them is absorbed. A residual
``add`` of a same-shaped value followed by an activation ONNX Runtime's ``FusedConv`` takes
(ResNet's ``relu(bn2(conv2(x)) + identity)``) is absorbed too: the added value becomes the
fused node's fourth input (``FusedConv``'s ``Z``) and the node gets ``residual=True``.
"""

from __future__ import annotations

import numpy as np

from flowserve.exporter.passes.export_graph import ExportGraph, FusedGroup, fused_node
from flowserve.exporter.passes.act_match import activation_after
from flowserve.ir.graph import PassResult

AFFINE = ("add", "sub", "mul", "div")
RESIDUAL_ACTIVATIONS = ("relu", "tanh", "sigmoid")  # and clip:lo:hi (FusedConv's activations)


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


def _fold_affine(g: ExportGraph, conv, weight: np.ndarray, rescale: bool = True):
    """Walk the per-channel affine chain after ``conv``: (nodes, W, b or None, last value);
    without ``rescale`` (a fake-quantized weight), only the bias adds."""
    rank = len(g.ir.values[conv.outputs[0]].shape)
    channels = weight.shape[0]
    w, b, y, nodes = weight.astype(np.float64), None, conv.outputs[0], []
    while g.single_use(y):
        (user,) = g.users(y)
        c = _per_channel(g, user, y, channels, rank)
        if c is None or not rescale and user.op in ("mul", "div"):
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


def _residual_after(g: ExportGraph, y: str):
    """(add node, added value, activation) when ``y``'s only user adds another value of
    ``y``'s shape and dtype and an activation that ``FusedConv`` applies follows; else None."""
    if not g.single_use(y):
        return None
    (add,) = g.users(y)
    if add.op != "add" or len(add.inputs) != 2 or y not in add.inputs:
        return None
    z = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
    mine, other = g.ir.values[y], g.ir.values[z]
    if z == y or g.is_const(z) or (other.shape, other.dtype) != (mine.shape, mine.dtype):
        return None
    act = activation_after(g, add.outputs[0])
    if act is None or not (act[1] in RESIDUAL_ACTIVATIONS or act[1].startswith("clip:")):
        return None
    return add, z, act


def fuse_one(g: ExportGraph, conv) -> bool:
    x, wname = conv.inputs
    quantized = g.is_quantized_const(wname)  # QAT: bias and activation only, the Q/DQ kept around
    if not g.is_const(wname) and not quantized:
        return False
    weight = np.asarray(g.consts[g.producer(wname).inputs[0] if quantized else wname])
    affine, w, b, y = _fold_affine(g, conv, weight, rescale=not quantized)
    residual = None if quantized else _residual_after(g, y)
    act = residual[2] if residual else activation_after(g, y)
    nodes = [conv] + affine + ([residual[0]] if residual else []) + (act[0] if act else [])
    if len(nodes) == 1:
        return False
    if act is not None:
        y = act[0][-1].outputs[0]
    inputs = [x, wname]
    scales = any(n.op in ("mul", "div") for n in affine)
    if scales:
        inputs[1] = g.add_const(f"{wname}:folded", w.astype(weight.dtype))
    has_bias = b is not None
    if b is None and residual:  # FusedConv's Z is its fourth input, after B
        b = np.zeros(weight.shape[0])
    if b is not None:
        inputs.append(g.add_const(f"{conv.outputs[0]}:bias", b.astype(weight.dtype)))
    if residual:
        inputs.append(residual[1])
    attrs = {**conv.attrs, "act": act[1] if act else None, "residual": bool(residual)}
    detail = ", ".join(p for p in ("bias" if has_bias else "", "batchnorm folded" if scales else "",
                                   "residual add" if residual else "", act[1] if act else "") if p)
    group = FusedGroup("Conv", conv.scope, [n.op for n in nodes], y, detail)
    g.replace(nodes, fused_node("Conv", inputs, [y], attrs, conv), group)
    return True


def fuse_conv(g: ExportGraph) -> PassResult:
    count = 0
    for node in list(g.ir.nodes):
        if node.op == "conv" and node in g.ir.nodes and fuse_one(g, node):
            count += 1
    return PassResult(g, count > 0)
