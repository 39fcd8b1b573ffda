"""Activation checkpointing: recompute a module's forward in the backward pass.

The forward nodes of a checkpointed module scope keep running in the forward pass, but
backward nodes no longer read their outputs (the activations): the pass re-emits the
needed forward nodes right before the first backward node that uses them, and points
the backward nodes at the recomputed values. Activations of the module are then free
after the forward pass instead of living until the backward pass reaches them.

>>> ir, changed = checkpoint_activations(ir, {"model.layer1"}, forward_values)  # doctest: +SKIP
"""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, Node, PassResult, Value

RECOMPUTED = "@recompute"


def _recomputable(node: Node) -> bool:
    """Random ops are kept, not recomputed: a second draw would differ from the first."""
    return "dropout" not in node.op and "random" not in node.op and "rand" not in node.op


def _in_scopes(scope: str, scopes) -> bool:
    return any(scope == s or scope.startswith(s + ".") for s in scopes)


class _Recomputer:
    def __init__(self, ir: GraphIR, checkpointed: dict):
        self.ir = ir
        self.checkpointed = checkpointed  # value name -> forward node to recompute it
        self.mapping: dict = {}

    def value(self, name: str, emitted: list) -> str:
        """The recomputed twin of ``name``, emitting the nodes it needs into ``emitted``."""
        if name not in self.checkpointed:
            return name
        if name not in self.mapping:
            node = self.checkpointed[name]
            inputs = [self.value(n, emitted) for n in node.inputs]
            outputs = []
            for out in node.outputs:
                twin = out + RECOMPUTED
                meta = self.ir.values[out]
                self.ir.add_value(Value(twin, meta.shape, meta.dtype))
                self.mapping[out] = twin
                outputs.append(twin)
            emitted.append(Node(node.op, inputs, outputs, dict(node.attrs), node.scope, node.loc, dict(node.batch)))
        return self.mapping[name]


def checkpoint_activations(ir: GraphIR, scopes, forward_values: set) -> PassResult:
    """Recompute forward values of modules in ``scopes`` (and their submodules) for the
    backward nodes (nodes whose outputs are not in ``forward_values``) that read them."""
    scopes = set(scopes)
    if not scopes:
        return PassResult(ir, False)
    checkpointed = {}
    for node in ir.nodes:
        if _in_scopes(node.scope, scopes) and _recomputable(node) and all(o in forward_values for o in node.outputs):
            for out in node.outputs:
                checkpointed[out] = node
    recomputer = _Recomputer(ir, checkpointed)
    nodes, changed = [], False
    for node in ir.nodes:
        is_backward = not all(o in forward_values for o in node.outputs)
        if is_backward and any(n in checkpointed for n in node.inputs):
            emitted: list = []
            node.inputs = [recomputer.value(n, emitted) for n in node.inputs]
            nodes += emitted
            changed = True
        nodes.append(node)
    ir.nodes = nodes
    ir.attrs["activation_checkpointing"] = sorted(scopes)
    return PassResult(ir, changed)
