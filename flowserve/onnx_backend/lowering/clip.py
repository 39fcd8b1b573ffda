"""``Min(Max(x, lo), hi)`` with scalar constant bounds (ReLU6, hardtanh, clamp) as one
``Clip``: one pass over the tensor instead of two. Runs on the lowered nodes, where a
``Max`` result read by nothing but its ``Min`` is known (in a training graph the clamp's
gradient mask reads ``x`` and the clamp's output only: ``fold_clamp_gradient_masks``)."""

from __future__ import annotations

from onnx import helper, numpy_helper


def _scalar(b, name: str):
    tensor = b.initializers.get(name)
    if tensor is None:
        return None
    array = numpy_helper.to_array(tensor)
    return array.reshape(()) if array.size == 1 else None


def fold_clip(b, keep: set) -> int:
    """Rewrite builder ``b``'s nodes in place; ``keep``: names read outside the nodes
    (graph outputs). Returns how many ``Clip`` nodes it made."""
    producers = {out: node for node in b.nodes for out in node.output}
    reads: dict = {}
    for node in b.nodes:
        for name in node.input:
            reads[name] = reads.get(name, 0) + 1
    dropped, folded, bound_names = set(), 0, set()
    for i, node in enumerate(b.nodes):
        if node.op_type != "Min" or len(node.input) != 2:
            continue
        inner = producers.get(node.input[0])
        if inner is None or inner.op_type != "Max" or len(inner.input) != 2:
            continue
        lo, hi = _scalar(b, inner.input[1]), _scalar(b, node.input[1])
        if lo is None or hi is None or not lo <= hi or reads.get(node.input[0]) != 1 or node.input[0] in keep:
            continue
        bounds = [b.const(lo, lo.dtype), b.const(hi, hi.dtype)]
        b.nodes[i] = helper.make_node("Clip", [inner.input[0], *bounds], list(node.output), name=node.name)
        dropped.add(id(inner))
        bound_names.update([inner.input[1], node.input[1]])
        folded += 1
    b.nodes[:] = [node for node in b.nodes if id(node) not in dropped]
    still_read = {name for node in b.nodes for name in node.input} | keep
    b.drop_initializers(bound_names - still_read)  # the bounds' old constants nothing else reads
    return folded
