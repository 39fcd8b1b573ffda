"""What the exporter's passes rewrite: ``ExportGraph`` (the IR, the arrays that become
initializers, the fused groups formed so far), ``FusedGroup`` and ``fused_node``.

Fusion passes replace a matched group of nodes by one node whose op is ``fused.<Kind>``
(see ``exporter/fused.py`` for how each kind is emitted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flowserve import dtypes
from flowserve.ir.graph import GraphIR, Node, Value
from flowserve.ir.passes import eliminate_dead_code
from flowserve.ir.passes.pattern import PatternGraph

FUSED_PREFIX = "fused."


@dataclass
class FusedGroup:
    """One fused subgraph: its kind, where it came from, what it replaced."""

    kind: str
    scope: str
    ops: list
    output: str
    detail: str = ""

    def to_json(self) -> dict:
        return {"kind": self.kind, "scope": self.scope, "ops": self.ops, "output": self.output,
                "detail": self.detail}


@dataclass
class ExportGraph(PatternGraph):
    """What the passes rewrite: the IR, the arrays baked as initializers, the groups
    (the queries and the node replacement are the core's ``PatternGraph``)."""

    groups: list = field(default_factory=list)
    folded: int = 0
    applied: list = field(default_factory=list)  # the passes that changed it, in order (run_passes)

    @classmethod
    def of(cls, ir: GraphIR, arrays: dict) -> "ExportGraph":
        """A private copy of ``ir`` (passes never touch the caller's graph)."""
        copy = ir.copy()
        return cls(copy, {k: arrays[k] for k in copy.state})

    def is_quantized_const(self, name: str) -> bool:
        """A constant fake-quantized (a QAT weight): its lowering stores the integers, so a
        fusion may take it as a weight as long as it does not rescale it."""
        node = self.producer(name)
        return node is not None and node.op == "fake_quant" and all(self.is_const(i) for i in node.inputs)

    def add_const(self, name: str, array) -> str:
        self.consts[name] = array
        value = Value(name, tuple(array.shape), dtypes.from_numpy(array.dtype).name)
        self.ir.values[name] = value
        self.ir.state[name] = value
        self.ir.state_kinds[name] = "constant"
        return name

    def replace(self, old: list, new: Node, group: FusedGroup | None = None) -> None:
        """Put ``new`` where the last of ``old`` was, drop ``old``, record ``group``."""
        if group is not None:
            self.groups.append(group)
        super().replace(old, new)

    def prune(self) -> None:
        """Drop nodes whose outputs nobody reads, and state nothing reads (the core's DCE)."""
        eliminate_dead_code(self.ir, drop_unused_state=True)
        for name in [k for k in self.consts if k not in self.ir.state]:
            del self.consts[name]
        self.refresh()


def fused_node(kind: str, inputs: list, outputs: list, attrs: dict, like: Node) -> Node:
    return Node(FUSED_PREFIX + kind, list(inputs), list(outputs), dict(attrs), like.scope, like.loc)
