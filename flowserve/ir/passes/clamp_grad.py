"""One gradient mask per clamp: ``clamp(x, lo, hi)`` is ``minimum(maximum(x, lo), hi)``
(ReLU6, hardtanh), and its backward multiplies the output gradient by two masks, one per
primitive::

    g1 = g * cast(y2 == y1)          # minimum's vjp, y2 = minimum(y1, hi)
    gx = g1 * cast(y1 == x)          # maximum's vjp, y1 = maximum(x, lo)

Both masks are 1 exactly where ``y2 == x`` (``y2 == x`` means ``lo <= x <= hi``, which
makes both equalities hold; both holding gives ``y2 == y1 == x``), so the pass writes
``gx = g * cast(y2 == x)``: three full-tensor ops instead of six, the same numbers.

>>> ir, changed = fold_clamp_gradient_masks(ir)      # doctest: +SKIP
"""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, Node, PassResult, Value


def _mask_source(producers: dict, mask: str):
    """``(a, b)`` when ``mask`` is ``cast(eq(a, b))``, else None."""
    cast = producers.get(mask)
    if cast is None or cast.op != "cast":
        return None
    eq = producers.get(cast.inputs[0])
    return tuple(eq.inputs) if eq is not None and eq.op == "eq" else None


def _match(node: Node, producers: dict, uses: dict):
    """``(g, y2, x)`` when ``node`` is ``(g * mask(y2 == y1)) * mask(y1 == x)`` of a clamp."""
    if node.op != "mul":
        return None
    g1, m2 = node.inputs
    inner = producers.get(g1)
    second = _mask_source(producers, m2)
    if inner is None or inner.op != "mul" or second is None or uses.get(g1, 0) != 1:
        return None
    y1, x = second
    first = _mask_source(producers, inner.inputs[1])
    maximum, minimum = producers.get(y1), producers.get(first[0]) if first else None
    if first is None or first[1] != y1 or maximum is None or maximum.op != "maximum" or minimum is None:
        return None
    if maximum.inputs[0] != x or minimum.op != "minimum" or minimum.inputs[0] != y1:
        return None
    return inner.inputs[0], first[0], x


def fold_clamp_gradient_masks(ir: GraphIR) -> PassResult:
    producers = ir.producers()
    uses: dict = {}
    read = [name for node in ir.nodes for name in node.inputs]
    for name in read + [v.name for v in ir.outputs] + list(ir.updates.values()):
        uses[name] = uses.get(name, 0) + 1
    nodes, changed = [], False
    for node in ir.nodes:
        found = _match(node, producers, uses)
        if found is None:
            nodes.append(node)
            continue
        g, y2, x = found
        out = node.outputs[0]
        cast = producers[node.inputs[1]]
        ir.add_value(Value(f"{out}/clamp_eq", ir.values[out].shape, "bool"))
        ir.add_value(Value(f"{out}/clamp_mask", ir.values[out].shape, ir.values[out].dtype))
        nodes += [Node("eq", [y2, x], [f"{out}/clamp_eq"], {}, node.scope, node.loc),
                  Node("cast", [f"{out}/clamp_eq"], [f"{out}/clamp_mask"], dict(cast.attrs), node.scope, node.loc),
                  Node("mul", [g, f"{out}/clamp_mask"], [out], {}, node.scope, node.loc)]
        changed = True
    ir.nodes = nodes
    return PassResult(ir, changed)
