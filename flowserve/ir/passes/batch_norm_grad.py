"""Graph mode on CUDA: batch norm's backward as one node.

``batch_norm_train``'s gradient (``flowserve.ops.batch_norm._vjp``) is written with flowserve
ops, 23 IR nodes per layer (most of them on C-element vectors, each a kernel launch on a GPU)::

    r = 1 / sqrt(var + eps),  d = x - reshape(mean),  k = r * weight
    gx = g * reshape(k) + (d * reshape(k * r * r * sum(g * d) * (-1/n)) + reshape(k * sum(g) * (-1/n)))
    gw = sum(g * d) * r,  gb = sum(g)

This pass finds that subgraph beside each ``batch_norm_train`` node and replaces it by one
``fused.BatchNormBackward(g, x, weight, mean, var) -> (gx, gb[, gw])`` node, which the ONNX
backend lowers for CUDA (``flowserve.onnx_backend.lowering.norm``). Every node it removes
must be read only by the others it removes, so a gradient that also flows through the
batch's mean or variance (``g_mean``, ``g_var``) leaves the layer as it is. It runs on the
private copy of the IR graph mode lowers for CUDA, never on the IR a graph saves.
"""

from __future__ import annotations

import numpy as np

from flowserve.ir.graph import GraphIR, Node, PassResult
from flowserve.ir.passes.pattern import PatternGraph

FUSED_OP = "fused.BatchNormBackward"


class _Matcher:
    """Walks the vjp's nodes from known values; ``found`` collects the nodes it matched."""

    def __init__(self, g: PatternGraph):
        self.g = g
        self.found: list = []

    def user(self, op: str, first: str, second: str | None = None, const=None) -> str | None:
        """The output of the ``op`` node reading ``first`` (and ``second``, or a constant
        equal to ``const``) as its inputs in that order, or None."""
        for node in self.g.users(first):
            if node.op != op or node.inputs[0] != first:
                continue
            rest = node.inputs[1:]
            if second is not None and rest != [second]:
                continue
            if const is not None and not (len(rest) == 1 and self._const_is(rest[0], const)):
                continue
            self.found.append(node)
            return node.outputs[0]
        return None

    def _const_is(self, name: str, value: float) -> bool:
        array = self.g.consts.get(name)
        return array is not None and np.asarray(array).size == 1 and \
            np.isclose(float(np.asarray(array).reshape(-1)[0]), value, rtol=1e-6, atol=0.0)

    def const_user(self, op: str, value: float, second: str) -> str | None:
        """The output of the ``op`` node reading (a constant equal to ``value``, ``second``)."""
        for node in self.g.users(second):
            if node.op == op and node.inputs[1:] == [second] and self._const_is(node.inputs[0], value):
                self.found.append(node)
                return node.outputs[0]
        return None


def _match(g: PatternGraph, bn: Node):
    """``(inputs, outputs, nodes)`` of the fused node for ``bn``'s backward, or None."""
    x, weight, _ = bn.inputs
    _, mean, var = bn.outputs
    shape = g.ir.values[x].shape
    n = int(np.prod([int(d) for d in shape], dtype=np.int64)) // int(shape[1])
    m = _Matcher(g)
    eps = m.user("add", var, const=float(bn.attrs["eps"]))
    sqrt = eps and m.user("sqrt", eps)
    r = sqrt and m.const_user("div", 1.0, sqrt)
    mean4 = m.user("reshape", mean)
    d = mean4 and m.user("sub", x, mean4)
    k = r and m.user("mul", r, weight)
    k4 = k and m.user("reshape", k)
    if not (d and k4):
        return None
    grad = next((u for u in g.users(k4) if u.op == "mul" and u.inputs[1] == k4), None)
    if grad is None:
        return None
    m.found.append(grad)
    dy = grad.inputs[0]
    sum_g = _sum_of(g, dy, len(shape), [u.inputs[1] for u in g.users(k) if u.op == "mul" and u.inputs[0] == k])
    if sum_g is None:
        return None
    m.found.append(g.producer(sum_g))
    sum_gd = m.user("mul", dy, d) and m.user("sum", m.found[-1].outputs[0])
    gx = sum_gd and _input_gradient(m, grad.outputs[0], d, k, r, sum_g, sum_gd, -1.0 / n)
    if not gx:
        return None
    gw = m.user("mul", sum_gd, r)
    outputs = [gx, sum_g] + ([gw] if gw else [])
    return [dy, x, weight, mean, var], outputs, m.found


def _input_gradient(m: _Matcher, scaled: str, d: str, k: str, r: str, sum_g: str, sum_gd: str,
                    inv_n: float) -> str | None:
    """``scaled + (d * reshape(k * r * r * sum_gd * inv_n) + reshape(k * sum_g * inv_n))``:
    the input gradient, where ``scaled = g * reshape(k)``."""
    t1 = m.user("mul", k, r)
    t1 = t1 and m.user("mul", t1, r)
    t1 = t1 and m.user("mul", t1, sum_gd)
    t1 = t1 and m.user("mul", t1, const=inv_n)
    t1 = t1 and m.user("reshape", t1)
    t1 = t1 and m.user("mul", d, t1)
    t2 = t1 and m.user("mul", k, sum_g)
    t2 = t2 and m.user("mul", t2, const=inv_n)
    t2 = t2 and m.user("reshape", t2)
    inner = t2 and m.user("add", t1, t2)
    return inner and m.user("add", scaled, inner)


def _sum_of(g: PatternGraph, dy: str, ndim: int, candidates: list) -> str | None:
    """The one of ``candidates`` that is ``sum(dy)`` over every dim but the channels (the
    batch norm's own: two layers reading the same gradient each sum it)."""
    axes = [0] + list(range(2, ndim))
    for name in candidates:
        node = g.producer(name)
        if node is not None and node.op == "sum" and node.inputs == [dy] and \
                list(node.attrs.get("axes", ())) == axes and not node.attrs.get("keepdims"):
            return name
    return None


def _removable(g: PatternGraph, nodes: list, outputs: list) -> bool:
    """Whether every value ``nodes`` make, but ``outputs``, is read by ``nodes`` alone."""
    inside = {id(n) for n in nodes}
    for node in nodes:
        for out in node.outputs:
            if out in outputs:
                continue
            if out in g.output_names or any(id(u) not in inside for u in g.users(out)):
                return False
    return True


def _placed_after_readers(ir: GraphIR, nodes: list, outputs: list) -> bool:
    """Whether no node outside ``nodes`` reads ``outputs`` before the last of ``nodes``
    (where the fused node goes)."""
    inside = {id(n) for n in nodes}
    last = max(i for i, n in enumerate(ir.nodes) if id(n) in inside)
    return not any(id(n) not in inside and set(n.inputs) & set(outputs) for n in ir.nodes[:last])


def fuse_batch_norm_backward(ir: GraphIR, constants: dict | None) -> PassResult:
    """Every training batch norm's backward of ``ir`` as one ``fused.BatchNormBackward``.
    ``constants``: state name -> array of the trace's constants (the vjp's ``-1/n``, ``eps``)."""
    g = PatternGraph(ir, constants or {})
    g.refresh()
    count = 0
    for bn in [n for n in ir.nodes if n.op == "batch_norm_train"]:
        match = _match(g, bn)
        if match is None:
            continue
        inputs, outputs, nodes = match
        if not _removable(g, nodes, outputs) or not _placed_after_readers(ir, nodes, outputs):
            continue
        g.replace(nodes, Node(FUSED_OP, inputs, outputs, {"eps": float(bn.attrs["eps"])}, bn.scope, bn.loc))
        count += 1
    return PassResult(ir, count > 0)
