"""``PatternGraph``: an IR with the queries pattern-matching passes ask (who produces a
value, who reads it, whether it is a constant and may vanish in a fusion) and the one edit
they make (a group of nodes replaced by one node).

Graph mode's fusions (``flowserve.ir.passes.attention``) and the exporter's passes
(``flowserve.exporter.passes.ExportGraph``, which adds the fused groups' report) match on it.

>>> g = PatternGraph(ir, constants)                     # doctest: +SKIP
>>> g.refresh()                                          # doctest: +SKIP
>>> [n.op for n in g.users("x")]                         # doctest: +SKIP
['matmul']
"""

from __future__ import annotations

from dataclasses import dataclass

from flowserve.ir.graph import GraphIR, Node


@dataclass
class PatternGraph:
    """``ir`` and ``consts`` (state name -> array of the constants and baked parameters);
    call ``refresh()`` before the queries and after editing ``ir.nodes`` directly."""

    ir: GraphIR
    consts: dict

    def producer(self, name: str) -> Node | None:
        return self._producers.get(name)

    def users(self, name: str) -> list:
        return self._users.get(name, [])

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def single_use(self, name: str) -> bool:
        """Used by exactly one node and not a graph output (so it may vanish in a fusion)."""
        return len(self.users(name)) == 1 and name not in self.output_names

    def refresh(self) -> None:
        self._producers = self.ir.producers()
        self._users = self.ir.consumers()
        self.output_names = {v.name for v in self.ir.outputs} | set(self.ir.updates.values())

    def replace(self, old: list, new: Node) -> None:
        """Put ``new`` where the last of ``old`` was, and drop ``old``."""
        drop = {id(n) for n in old}
        last = max(i for i, n in enumerate(self.ir.nodes) if id(n) in drop)
        nodes = []
        for i, n in enumerate(self.ir.nodes):
            if i == last:
                nodes.append(new)
            if id(n) not in drop:
                nodes.append(n)
        self.ir.nodes = nodes
        self.refresh()
