"""Weight-gradient convolutions as matrix products.

A convolution's weight gradient is itself a convolution (``flowserve.ops.conv.weight_grad``)
whose kernel is the output gradient: a kernel as large as the image and an output as small
as the original kernel (3x3). Convolution kernels are built for the opposite shape; ONNX
Runtime runs these 2-3x slower than the forward convolution of the same cost (measured on
resnet18). Each output position ``(i, j)`` of such a convolution is one matrix product::

    Y[:, :, i, j] = reshape(Xpad[:, :, i*s : i*s + (kh-1)*d + 1 : d, j*s : ... : d], (B, C*kh*kw))
                    @ reshape(K, (O, C*kh*kw)).T

so the pass rewrites ungrouped convolutions whose kernel covers at least 16 positions, whose
output at most 16 and whose products are at least 1024 long (batch x image positions;
small batches and images keep their convolution, whose rounding eager-vs-graph checks of
small models rely on) as matrix products of its ``oh*ow`` taps. A strided convolution's
weight gradient is larger than the kernel and cropped by a ``slice``: only the taps the crop
keeps are computed. The taps are stacked into one matrix and multiplied once: the output
gradient is packed once instead of once per tap. Where the pass may add constants (graph
mode), the taps are one ``take`` (ONNX ``Gather``) of the layer input laid out
``(N, H*W, C)`` and zero padded, at a constant table of flat positions: every row of the
``(N*kh*kw, taps*C)`` matrix is a run of ``C`` contiguous values, copied once (ResNet-18
CIFAR step: 8-11% less wall time than ``slice`` per tap and ``concat`` in three runs of
``bench/profile_ort_ops.py``, CPU time 0-9% less); elsewhere the taps are ``slice``s of
the padded ``(C, N, H, W)`` transpose, ``concat``-ed. ``stacked=False`` multiplies each tap
on its own (``graph.config.allow_stacked_weight_gradient(False)``). Each element's sum is
the same; only the summation order changes.

>>> ir, changed = conv_weight_grad_as_matmul(ir)      # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from flowserve.ir.graph import GraphIR, Node, PassResult, Value

MIN_KERNEL = 16  # kernel positions (kh*kw) from which a conv is a weight gradient
MAX_OUTPUT = 16  # output positions (oh*ow) up to which taps are worth unrolling
MIN_DEPTH = 1024  # products shorter than this (C*kh*kw) stay convolutions


class _Emitter:
    def __init__(self, ir: GraphIR, node: Node):
        self.ir, self.node, self.nodes, self.count = ir, node, [], 0

    def constant(self, array: np.ndarray, constants: dict) -> str:
        """A new constant of the IR holding ``array`` (its data in ``constants``)."""
        name = f"{self.node.outputs[0]}/wg_const_{len(constants)}"
        self.ir.state[name] = self.ir.add_value(Value(name, array.shape, str(array.dtype)))
        self.ir.state_kinds[name] = "constant"
        constants[name] = array
        return name

    def op(self, op: str, inputs: list, shape, attrs: dict, name: str | None = None) -> str:
        self.count += 1
        out = name or f"{self.node.outputs[0]}/wg_{op}_{self.count}"
        dtype = self.ir.values[inputs[0]].dtype
        self.ir.add_value(Value(out, tuple(shape), dtype))
        self.nodes.append(Node(op, list(inputs), [out], attrs, self.node.scope, self.node.loc))
        return out


def _matches(ir: GraphIR, node: Node) -> bool:
    if node.op != "conv" or node.attrs.get("groups", 1) != 1:
        return False
    x, w = (ir.values[n].shape for n in node.inputs)
    y = ir.values[node.outputs[0]].shape
    if len(x) != 4:
        return False
    return w[2] * w[3] >= MIN_KERNEL and y[2] * y[3] <= MAX_OUTPUT and w[1] * w[2] * w[3] >= MIN_DEPTH


def _cropped(node: Node, users: list, oh: int, ow: int):
    """The slice node that keeps the top-left ``(rows, cols)`` of ``node``'s output, when
    that is its only user (a strided convolution's weight gradient: the conv's output is
    larger than the kernel), else None."""
    if len(users) != 1 or users[0].op != "slice":
        return None
    a = users[0].attrs
    if list(a.get("axes", [])) != [2, 3] or list(a.get("starts", [])) != [0, 0] \
            or list(a.get("steps", [])) != [1, 1]:
        return None
    rows, cols = (min(int(e), n) for e, n in zip(a["ends"], (oh, ow)))
    return users[0] if (rows, cols) != (oh, ow) else None


def _layer_input(ir: GraphIR, producers: dict, x: str) -> str | None:
    """The layer input ``(N, C, H, W)`` whose ``(C, N, H, W)`` transpose ``x`` is
    (``flowserve.ops.conv.weight_grad``: a reshape to ``(N, 1, C, H, W)``, a permute, a
    reshape), else None."""
    merged = producers.get(x)
    moved = producers.get(merged.inputs[0]) if merged is not None and merged.op == "reshape" else None
    split = producers.get(moved.inputs[0]) if moved is not None and moved.op == "permute" else None
    if split is None or split.op != "reshape" or list(moved.attrs["perm"]) != [2, 1, 0, 3, 4]:
        return None
    c, n, h, w = ir.values[x].shape
    source = split.inputs[0]
    return source if tuple(ir.values[source].shape) == (n, c, h, w) else None


def _gathered_taps(e: _Emitter, x: str, k: str, out: str, taps: tuple, constants: dict, producers: dict) -> None:
    """The stacked taps as one ``take`` (ONNX Gather) from the padded layer input laid out
    ``(N, H*W, C)``: rows ``(N, kh*kw)`` (the output gradient's positions, in the order of
    its ``(O, N*kh*kw)`` matrix), columns ``(taps, C)``; one product gives ``(O, taps*C)``."""
    ir, a = e.ir, e.node.attrs
    c, n, h, w = ir.values[x].shape
    o, _, kh, kw = ir.values[k].shape
    oh, ow = taps
    (s0, s1), (d0, d1), pads = a["stride"], a["dilation"], a["pads"]
    source = _layer_input(ir, producers, x)
    rows = e.op("permute", [source or x], (n, h, w, c), {"perm": [0, 2, 3, 1] if source else [1, 2, 3, 0]})
    hp, wp = h + pads[0] + pads[2], w + pads[1] + pads[3]
    if any(pads):
        rows = e.op("slice_backward", [rows], (n, hp, wp, c), {
            "shape": [n, hp, wp, c], "starts": [pads[0], pads[1]], "ends": [pads[0] + h, pads[1] + w],
            "axes": [1, 2], "steps": [1, 1]})
    flat = e.op("reshape", [rows], (n, hp * wp, c), {"shape": [n, hp * wp, c]})
    y, x_at = (g.reshape(-1, 1) for g in np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij"))
    i, j = (g.reshape(1, -1) for g in np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij"))
    index = ((y * d0 + i * s0) * wp + x_at * d1 + j * s1).astype(np.int64)  # (kh*kw, taps)
    cols = e.op("take", [flat, e.constant(index, constants)], (n, kh * kw, oh * ow, c), {"axis": 1})
    cols = e.op("reshape", [cols], (n * kh * kw, oh * ow * c), {"shape": [n * kh * kw, oh * ow * c]})
    grad = e.op("reshape", [k], (o, n * kh * kw), {"shape": [o, n * kh * kw]})
    product = e.op("matmul", [grad, cols], (o, oh * ow * c), {})
    by_tap = e.op("reshape", [product], (o, oh, ow, c), {"shape": [o, oh, ow, c]})
    e.op("permute", [by_tap], (c, o, oh, ow), {"perm": [3, 0, 1, 2]}, name=out)


def _rewrite(ir: GraphIR, node: Node, crop: Node | None, stacked: bool, constants: dict | None,
             producers: dict) -> list:
    """Matrix products for ``node``'s output taps (one of the stacked taps, gathered where
    ``constants`` takes the gather's index, else one per tap); with ``crop``, only the taps
    that slice keeps, written as the slice's output."""
    e = _Emitter(ir, node)
    x, k = node.inputs
    b, c, h, w = ir.values[x].shape
    o, _, kh, kw = ir.values[k].shape
    _, _, oh, ow = ir.values[node.outputs[0]].shape
    out = node.outputs[0]
    if crop is not None:
        oh, ow = (min(int(end), n) for end, n in zip(crop.attrs["ends"], (oh, ow)))
        out = crop.outputs[0]
    if stacked and constants is not None and oh * ow > 1:
        _gathered_taps(e, x, k, out, (oh, ow), constants, producers)
        return e.nodes
    a = node.attrs
    (s0, s1), (d0, d1), pads = a["stride"], a["dilation"], a["pads"]
    if any(pads):
        shape = [b, c, h + pads[0] + pads[2], w + pads[1] + pads[3]]
        x = e.op("slice_backward", [x], shape, {"shape": shape, "starts": [pads[0], pads[1]],
                                                  "ends": [pads[0] + h, pads[1] + w], "axes": [2, 3],
                                                  "steps": [1, 1]})
    flat_k = e.op("reshape", [k], (o, c * kh * kw), {"shape": [o, c * kh * kw]})
    k_t = e.op("permute", [flat_k], (c * kh * kw, o), {"perm": [1, 0]})
    taps = []
    for i in range(oh):
        for j in range(ow):
            tap = e.op("slice", [x], (b, c, kh, kw), {
                "starts": [i * s0, j * s1], "ends": [i * s0 + (kh - 1) * d0 + 1, j * s1 + (kw - 1) * d1 + 1],
                "axes": [2, 3], "steps": [d0, d1]})
            taps.append(e.op("reshape", [tap], (b, c * kh * kw), {"shape": [b, c * kh * kw]}))
    n = len(taps)
    if stacked:
        rows = e.op("concat", taps, (n * b, c * kh * kw), {"axis": 0}) if n > 1 else taps[0]
        product = e.op("matmul", [rows, k_t], (n * b, o), {})
        by_tap = e.op("reshape", [product], (n, b, o), {"shape": [n, b, o]})
        joined = e.op("permute", [by_tap], (b, o, n), {"perm": [1, 2, 0]})
    else:
        columns = [e.op("reshape", [e.op("matmul", [t, k_t], (b, o), {})], (b, o, 1), {"shape": [b, o, 1]})
                   for t in taps]
        joined = e.op("concat", columns, (b, o, n), {"axis": 2}) if n > 1 else columns[0]
    e.op("reshape", [joined], (b, o, oh, ow), {"shape": [b, o, oh, ow]}, name=out)
    return e.nodes


def conv_weight_grad_as_matmul(ir: GraphIR, stacked: bool = True, constants: dict | None = None) -> PassResult:
    users: dict = {}
    for node in ir.nodes:
        for name in node.inputs:
            users.setdefault(name, []).append(node)
    outputs = {v.name for v in ir.outputs}
    producers = ir.producers()
    nodes, changed, cropped = [], False, set()
    for node in ir.nodes:
        if id(node) in cropped:
            continue
        if _matches(ir, node):
            _, _, oh, ow = ir.values[node.outputs[0]].shape
            crop = None if node.outputs[0] in outputs else _cropped(node, users.get(node.outputs[0], []), oh, ow)
            nodes += _rewrite(ir, node, crop, stacked, constants, producers)
            if crop is not None:
                cropped.add(id(crop))
            changed = True
        else:
            nodes.append(node)
    ir.nodes = nodes
    return PassResult(ir, changed)
