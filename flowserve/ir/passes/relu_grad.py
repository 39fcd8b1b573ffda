"""Graph mode on CUDA: ReLU's backward in two nodes, not three.

``relu``'s vjp multiplies the output gradient by a mask, ``g * cast(y > 0)``: a comparison,
a cast and a product, each a kernel launch on a GPU. Since ``y = relu(x) >= 0``, the mask
is ``sign(y)`` (1 where ``y > 0``, 0 where ``y == 0``), so the pass writes ``g * sign(y)``:
the same numbers (``inf * 0`` stays NaN as in eager mode), one node fewer per ReLU. It runs on
the private copy of the IR graph mode lowers for CUDA, never on the IR a graph saves.
"""

from __future__ import annotations

import numpy as np

from flowserve.ir.graph import GraphIR, Node, PassResult, Value
from flowserve.ir.passes.pattern import PatternGraph


def _relu_mask(g: PatternGraph, mask: str) -> str | None:
    """``y`` when ``mask`` is ``cast(gt(y, 0))`` of a ReLU output ``y`` of the mask's dtype,
    the comparison and the cast read by nothing else; else None."""
    cast = g.producer(mask)
    if cast is None or cast.op != "cast" or not g.single_use(mask) or not g.single_use(cast.inputs[0]):
        return None
    gt = g.producer(cast.inputs[0])
    if gt is None or gt.op != "gt" or gt.inputs[1] not in g.consts:
        return None
    zero = np.asarray(g.consts[gt.inputs[1]])
    y = gt.inputs[0]
    relu = g.producer(y)
    if relu is None or relu.op != "relu" or zero.size != 1 or float(zero.reshape(-1)[0]) != 0.0:
        return None
    return y if g.ir.values[y].dtype == g.ir.values[mask].dtype else None


def relu_grad_as_sign(ir: GraphIR, constants: dict | None) -> PassResult:
    """Every ``g * cast(relu(x) > 0)`` of ``ir`` as ``g * sign(relu(x))``."""
    g = PatternGraph(ir, constants or {})
    g.refresh()
    count = 0
    for node in [n for n in ir.nodes if n.op == "mul"]:
        y = _relu_mask(g, node.inputs[1])
        if y is None:
            continue
        cast = g.producer(node.inputs[1])
        gt = g.producer(cast.inputs[0])
        sign = f"{node.outputs[0]}/relu_mask"
        ir.add_value(Value(sign, ir.values[y].shape, ir.values[y].dtype))
        g.replace([gt, cast], Node("sign", [y], [sign], {}, node.scope, node.loc))
        node.inputs[1] = sign
        g.refresh()
        count += 1
    return PassResult(ir, count > 0)
