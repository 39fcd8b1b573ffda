"""The graph IR: values, nodes, and a graph of them, all plain JSON-able data.

A ``GraphIR`` is what ``nn.Graph`` traces, what passes rewrite, what the exporter lowers
to ONNX and what ``flow.save`` writes as ``graph.json``. Names are deterministic: inputs by
their build() argument names, state by full module path (``model.0.weight``), other
values by module scope and op (``model.0/matmul_3``).
"""

from __future__ import annotations

import copy as _copy
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from flowserve.dispatch import REGISTRY
from flowserve.errors import SavedGraphError


@dataclass
class Value:
    """A tensor in the graph: its name, shape and dtype name. ``-1`` marks a dynamic dim."""

    name: str
    shape: tuple
    dtype: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, d: dict) -> "Value":
        return cls(d["name"], tuple(d["shape"]), d["dtype"])


@dataclass
class Node:
    """One op application: ``outputs = op(*inputs, **attrs)`` inside module ``scope``."""

    op: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    scope: str = ""
    loc: str = ""
    batch: dict = field(default_factory=dict)  # attr name -> positions that hold the batch size (and
    # "<attr>@steps" -> [[position, [[op, k], ...]], ...] where that is an expression of it: ops.dims)

    def to_json(self) -> dict:
        out = {"op": self.op, "inputs": self.inputs, "outputs": self.outputs, "attrs": self.attrs,
               "scope": self.scope, "loc": self.loc}
        if self.batch:
            out["batch"] = self.batch
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Node":
        batch = {str(k): ([[int(i), [[str(op), int(n)] for op, n in steps]] for i, steps in v]
                          if str(k).endswith("@steps") else [int(i) for i in v])  # (flowserve.ops.dims)
                 for k, v in dict(d.get("batch", {})).items()}
        return cls(d["op"], list(d["inputs"]), list(d["outputs"]), dict(d.get("attrs", {})),
                   d.get("scope", ""), d.get("loc", ""), batch)


STATE_KINDS = ("parameter", "buffer", "optimizer", "constant", "system")


class PassResult(NamedTuple):
    """What every pass returns, in ``flowserve/ir/passes`` and ``exporter/passes`` alike:
    the graph it rewrote (in place) and whether it changed anything (onnx-ir's shape).

    >>> ir, modified = eliminate_dead_code(ir)     # doctest: +SKIP
    """

    ir: object  # a GraphIR, or the exporter's ExportGraph around one
    modified: bool


@dataclass
class GraphIR:
    """A traced graph.

    ``inputs``/``outputs``: the signature, values fed and returned per call.
    ``state``: named tensors that live across calls (parameters, buffers, optimizer state)
    and constants, each with a ``kind``; their data is kept outside the IR (``params``
    of a saved directory). ``updates``: state name -> value holding its new content
    after a call (training graphs).
    """

    name: str
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    state: dict = field(default_factory=dict)
    state_kinds: dict = field(default_factory=dict)
    nodes: list = field(default_factory=list)
    values: dict = field(default_factory=dict)
    updates: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)

    def value(self, name: str) -> Value:
        return self.values[name]

    def add_value(self, value: Value) -> Value:
        self.values[value.name] = value
        return value

    def producers(self) -> dict:
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict:
        users: dict = {}
        for node in self.nodes:
            for name in node.inputs:
                users.setdefault(name, []).append(node)
        return users

    def op_counts(self) -> dict:
        counts: dict = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return dict(sorted(counts.items()))

    def copy(self) -> "GraphIR":
        """An independent copy (nodes, values, signature, state, attrs), made directly
        rather than through JSON; values shared between fields stay shared."""
        copies: dict = {}

        def value(v: Value) -> Value:
            if id(v) not in copies:
                copies[id(v)] = Value(v.name, tuple(v.shape), v.dtype)
            return copies[id(v)]

        nodes = [Node(n.op, list(n.inputs), list(n.outputs), _copy.deepcopy(n.attrs), n.scope, n.loc, dict(n.batch))
                 for n in self.nodes]
        return GraphIR(self.name, [value(v) for v in self.inputs], [value(v) for v in self.outputs],
                       {k: value(v) for k, v in self.state.items()}, dict(self.state_kinds), nodes,
                       {k: value(v) for k, v in self.values.items()}, dict(self.updates),
                       _copy.deepcopy(self.attrs))

    # -- JSON ------------------------------------------------------------------------

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "inputs": [v.to_json() for v in self.inputs],
            "outputs": [v.to_json() for v in self.outputs],
            "state": {k: {**v.to_json(), "kind": self.state_kinds[k]} for k, v in self.state.items()},
            "nodes": [n.to_json() for n in self.nodes],
            "values": [v.to_json() for v in self.values.values()],
            "updates": self.updates,
            "attrs": self.attrs,
        }

    @classmethod
    def from_json(cls, d: dict, where: str = "graph.json") -> "GraphIR":
        try:
            ir = cls(d["name"])
            ir.inputs = [Value.from_json(v) for v in d["inputs"]]
            ir.outputs = [Value.from_json(v) for v in d["outputs"]]
            for name, v in d["state"].items():
                ir.state[name] = Value.from_json(v)
                ir.state_kinds[name] = v["kind"]
            ir.nodes = [Node.from_json(n) for n in d["nodes"]]
            ir.values = {v["name"]: Value.from_json(v) for v in d["values"]}
            ir.updates = dict(d.get("updates", {}))
            ir.attrs = dict(d.get("attrs", {}))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SavedGraphError(f"{where}: malformed graph IR ({type(exc).__name__}: {exc})") from None
        ir.validate(where)
        return ir

    def validate(self, where: str = "graph IR") -> None:
        """Every node's op is known and every value it reads is defined before it."""
        defined = {v.name for v in self.inputs} | set(self.state)
        for i, node in enumerate(self.nodes):
            if node.op not in REGISTRY:
                raise SavedGraphError(f"{where}: node {i} uses unknown op {node.op!r}")
            for name in node.inputs:
                if name not in defined:
                    raise SavedGraphError(f"{where}: node {i} ({node.op}) reads undefined value {name!r}")
            for name in node.outputs:
                if name not in self.values:
                    raise SavedGraphError(f"{where}: node {i} ({node.op}) writes value {name!r} with no metadata")
            defined.update(node.outputs)
        for v in self.outputs:
            if v.name not in defined:
                raise SavedGraphError(f"{where}: output {v.name!r} is never computed")
        for state, value in self.updates.items():
            if state not in self.state or value not in defined:
                raise SavedGraphError(f"{where}: update of {state!r} from {value!r} names an unknown value")

