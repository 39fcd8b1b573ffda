"""The autograd tape: one ``TapeNode`` per differentiable op recorded while grad mode is on.

Interpreters call ``record`` after running or tracing a primitive; the backward walk in
``flowserve.autograd.engine`` reads the nodes. Nothing here knows ``Tensor`` or the ops:
a node holds detached aliases of its inputs and outputs and, per input, where that input's
gradient goes (its producing node and output index, or the leaf tensor itself).
"""

from __future__ import annotations


class TapeNode:
    """One recorded op: what its vjp needs, and where each input's gradient goes."""

    __slots__ = ("prim", "attrs", "inputs", "outputs", "parents")

    def __init__(self, prim, attrs, inputs, outputs, parents):
        self.prim = prim
        self.attrs = attrs
        self.inputs = inputs
        self.outputs = outputs
        self.parents = parents

    def needs(self, i: int) -> bool:
        """Whether input ``i`` wants a gradient (vjp rules skip the others)."""
        return self.parents[i] is not None

    def name(self) -> str:
        return f"{self.prim.name}Backward"

    def __repr__(self) -> str:
        return f"<{self.name()}>"


def record(prim, inputs, outputs, attrs) -> None:
    """Attach a node for ``prim`` to its floating point ``outputs``."""
    parents = tuple(
        (t._node, t._out_index, t) if t._requires_grad else None for t in inputs
    )
    node = TapeNode(prim, attrs, tuple(t._alias() for t in inputs),
                    tuple(t._alias() for t in outputs), parents)
    for i, out in enumerate(outputs):
        if out._dtype.is_floating_point:
            out._requires_grad = True
            out._node = node
            out._out_index = i
