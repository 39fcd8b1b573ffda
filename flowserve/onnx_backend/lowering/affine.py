"""``x * s + c`` with ``s`` and ``c`` per channel (``(1, C, 1, ...)``: batch norm's backward
pass, ``d * A + B``, and its forward written with primitives) as one inference-mode
``BatchNormalization`` with ``scale=s``, ``B=c``, ``mean=0``, ``var=1`` and ``epsilon=0``:
one pass over the tensor instead of two. ONNX Runtime's CPU kernel computes
``x * (scale / sqrt(var + epsilon)) + (B - mean * scale / sqrt(...))``, which with those
inputs is ``x * s + c`` (``1 / sqrt(1)`` is exactly 1); it may round the product and the
sum once (a fused multiply-add) where two operators round twice. Runs on the lowered nodes,
for graph mode on ONNX Runtime's CPU provider, where a ``Mul`` read by nothing but its
``Add`` is known (``bench/profile_ort_ops.py``: the variant ``no channel affine`` turns it
off)."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

FLOATS = ("float32", "float64")
MAX_POSITIONS = 16  # lone per-channel ops on larger maps stay Mul and Sub (see fold_channel_scale_shift)


def _per_channel(b, producers: dict, name: str, rank: int, channels: int, metas: dict) -> str | None:
    """The ``(C,)`` tensor that ``name`` (a ``Reshape`` to ``[1, C, 1, ...]`` of rank ``rank``)
    spreads over the channels, else None."""
    node = producers.get(name)
    if node is None or node.op_type != "Reshape" or node.input[1] not in b.initializers:
        return None
    target = numpy_helper.to_array(b.initializers[node.input[1]]).tolist()
    if target[1:] != [channels] + [1] * (rank - 2) or target[0] not in (1, -1):  # -1: C values make it 1
        return None
    source = metas.get(node.input[0])
    if source is None or tuple(source.shape) != (channels,):
        return None
    return node.input[0]


def _affine(b, add, producers: dict, reads: dict, metas: dict, keep: set) -> tuple | None:
    """``(mul, x, s, c, factors)`` where ``add`` computes ``mul``'s ``x * s`` plus ``c``, ``s``
    and ``c`` per channel of ``x`` and ``factors`` the names that spread them; else None."""
    out = metas[add.output[0]]
    for product, shift in (add.input, add.input[::-1]):
        mul = producers.get(product)
        if mul is None or mul.op_type != "Mul" or reads.get(product) != 1 or product in keep:
            continue
        for x, scale in (mul.input, mul.input[::-1]):
            m = metas.get(x)
            if m is None or m.dtype not in FLOATS or len(m.shape) < 2 or tuple(m.shape) != tuple(out.shape):
                continue
            rank, channels = len(m.shape), int(m.shape[1])
            s = _per_channel(b, producers, scale, rank, channels, metas)
            c = _per_channel(b, producers, shift, rank, channels, metas)
            if s is not None and c is not None and metas[s].dtype == metas[c].dtype == m.dtype:
                return mul, x, s, c, (scale, shift)
    return None


def fold_channel_affine(b, metas: dict, keep: set) -> int:
    """Rewrite builder ``b``'s nodes in place; ``metas``: the IR's values (name -> shape and
    dtype) for the names the lowering kept; ``keep``: names read outside the nodes (graph
    outputs). Returns how many ``BatchNormalization`` nodes it made."""
    producers = {out: node for node in b.nodes for out in node.output}
    reads: dict = {}
    for node in b.nodes:
        for name in node.input:
            reads[name] = reads.get(name, 0) + 1
    dropped, bypassed = set(), set()
    for i, node in enumerate(b.nodes):
        if node.op_type != "Add" or node.output[0] not in metas:
            continue
        found = _affine(b, node, producers, reads, metas, keep)
        if found is None:
            continue
        mul, x, s, c, factors = found
        dtype, channels = np.dtype(metas[x].dtype), int(metas[x].shape[1])
        mean, var = b.const(np.zeros(channels), dtype), b.const(np.ones(channels), dtype)
        b.nodes[i] = helper.make_node("BatchNormalization", [x, s, c, mean, var], list(node.output),
                                      name=node.name, epsilon=0.0)
        dropped.add(id(mul))
        bypassed.update(factors)
    b.nodes[:] = [node for node in b.nodes if id(node) not in dropped]
    still_read = {name for node in b.nodes for name in node.input} | keep
    b.nodes[:] = [node for node in b.nodes  # the per-channel factors' reshapes that only the products read
                  if node.output[0] not in bypassed or node.output[0] in still_read]
    return len(dropped)


def _lone_channel_op(b, node, producers: dict, metas: dict) -> tuple | None:
    """``(x, c)`` where ``node`` is ``x * c`` or ``x - c`` with ``c`` (the ``(C,)`` tensor
    returned) spread over the channels of ``x`` (rank 3 or more), else None."""
    out = metas.get(node.output[0])
    if node.op_type not in ("Mul", "Sub") or out is None:
        return None
    for x, factor in (node.input, node.input[::-1]) if node.op_type == "Mul" else (node.input,):
        m = metas.get(x)
        if m is None or m.dtype not in FLOATS or len(m.shape) < 3 or tuple(m.shape) != tuple(out.shape) \
                or int(np.prod(m.shape[2:])) > MAX_POSITIONS:
            continue
        c = _per_channel(b, producers, factor, len(m.shape), int(m.shape[1]), metas)
        if c is not None and metas[c].dtype == m.dtype:
            return x, c
    return None


def fold_channel_scale_shift(b, metas: dict, keep: set) -> int:
    """The per-channel products and differences ``fold_channel_affine`` left (``x * s``,
    ``x - m``: batch norm's backward ``g * k`` and ``x - mean``) on maps of at most
    ``MAX_POSITIONS`` positions as inference-mode ``BatchNormalization`` too: ``x * s`` with
    ``scale=s``, ``B=0``, ``mean=0``, ``var=1``; ``x - m`` with ``scale=1``, ``B=0``,
    ``mean=m``, ``var=1`` (ONNX Runtime's kernel then adds ``-m * 1``: the same value). The
    broadcasting operators step through such small maps a few values at a time: a
    ``(64, 384, 2, 2)`` map times ``(1, 384, 1, 1)`` 0.21 against 0.65 ms, ``(64, 192, 4, 4)``
    0.13 against 0.32 (CPU time medians, two threads). On larger maps the kernel is no faster
    inside a step (ResNet-18's 32x32 to 8x8 maps: 92 ms more ``BatchNormalization`` for 43 ms
    less ``Sub`` and ``Mul``). Arguments as ``fold_channel_affine``'s; returns how many nodes
    it rewrote."""
    producers = {out: node for node in b.nodes for out in node.output}
    factors, folded = set(), 0
    for i, node in enumerate(b.nodes):
        found = _lone_channel_op(b, node, producers, metas)
        if found is None:
            continue
        x, c = found
        dtype, channels = np.dtype(metas[x].dtype), int(metas[x].shape[1])
        zeros, ones = b.const(np.zeros(channels), dtype), b.const(np.ones(channels), dtype)
        inputs = [x, c, zeros, zeros, ones] if node.op_type == "Mul" else [x, ones, zeros, c, ones]
        factors.update(name for name in node.input if name != x)
        b.nodes[i] = helper.make_node("BatchNormalization", inputs, list(node.output), name=node.name, epsilon=0.0)
        folded += 1
    still_read = {name for node in b.nodes for name in node.input} | keep
    b.nodes[:] = [node for node in b.nodes  # the per-channel factors' reshapes nothing reads now
                  if node.output[0] not in factors or node.output[0] in still_read]
    return folded
