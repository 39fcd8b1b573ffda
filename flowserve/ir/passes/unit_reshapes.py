"""Graph mode on CUDA: ``reshape -> permute -> reshape`` that only moves dims, as one permute.

A convolution's gradients (``flowserve.ops.conv``) lay tensors out for a grouped product by
a reshape that splits off a group dim, a permute and a reshape that merges it back; with one
group (every ungrouped convolution) both reshapes only insert and drop size-1 dims, and the
three nodes are one transpose of the input (ResNet-50's step: 106 such chains). The pass
writes that ``permute`` where the output's shape is the input's, permuted: the same
elements in the same order. It runs on the private copy of the IR graph mode lowers for
CUDA (a static batch), never on the IR a graph saves.
"""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, Node, PassResult
from flowserve.ir.passes.pattern import PatternGraph


def _sizes(shape) -> list:
    return [int(d) for d in shape if int(d) != 1]


def collapsed_permutation(s0: tuple, s1: tuple, perm: list, s3: tuple) -> list | None:
    """``q`` with ``transpose(x, q)`` equal to ``reshape(permute(reshape(x, s1), perm), s3)`` for
    ``x`` of shape ``s0``, where both reshapes only insert or drop size-1 dims; else None."""
    s2 = [s1[i] for i in perm]
    if _sizes(s0) != _sizes(s1) or _sizes(s2) != _sizes(s3) or len(s3) != len(s0):
        return None
    big0 = [i for i, d in enumerate(s0) if int(d) != 1]  # the j-th big dim of s1 is s0's big0[j]
    of_s1 = {i: big0[j] for j, i in enumerate(i for i, d in enumerate(s1) if int(d) != 1)}
    order = iter([of_s1[i] for i in perm if int(s1[i]) != 1])
    units = iter([i for i, d in enumerate(s0) if int(d) == 1])
    q = [next(order) if int(d) != 1 else next(units) for d in s3]
    return q if [int(s0[i]) for i in q] == [int(d) for d in s3] else None


def collapse_unit_reshapes(ir: GraphIR) -> PassResult:
    """Every such chain of ``ir`` as one ``permute`` (module docstring)."""
    g = PatternGraph(ir, {})
    g.refresh()
    count = 0
    for last in [n for n in ir.nodes if n.op == "reshape"]:
        middle = g.producer(last.inputs[0])
        first = g.producer(middle.inputs[0]) if middle is not None and middle.op == "permute" else None
        if first is None or first.op != "reshape" or not g.single_use(middle.outputs[0]) \
                or not g.single_use(first.outputs[0]):
            continue
        values = ir.values
        q = collapsed_permutation(tuple(values[first.inputs[0]].shape), tuple(values[first.outputs[0]].shape),
                         list(middle.attrs["perm"]), tuple(values[last.outputs[0]].shape))
        if q is None:
            continue
        g.replace([first, middle, last], Node("permute", [first.inputs[0]], list(last.outputs), {"perm": q},
                                              last.scope, last.loc))
        count += 1
    return PassResult(ir, count > 0)
