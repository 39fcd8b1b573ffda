"""Input signatures of a compiled graph: the static-input check, the dynamic batch
dimension, and the per-signature cache of ``@nn.Graph.with_dynamic_input_shape()``.

A graph is traced for the shapes and dtypes of its first call. A later call with other
shapes is refused with the static-input error, except for a new batch size when the
graph is batch-polymorphic: traced again at the new batch size, it records the same ops
with the same attributes and constants up to the batch size, and every op whose
attributes mention the batch size lowers batch-agnostically; then the one compiled
session (lowered with a symbolic batch axis) runs it, without recompiling.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from flowserve.errors import GraphError

BATCH_AWARE_OPS = ("reshape",)  # lowerings that compute the batch dim at run time


def signature(leaves: list, spec) -> tuple:
    return (repr(spec), tuple((tuple(t.shape), t.dtype.name) for t in leaves))


def batch_size(leaves: list) -> int | None:
    """The common dim 0 of all inputs, or None when they have none in common."""
    dims = {t.shape[0] if t.ndim else None for t in leaves}
    return dims.pop() if len(dims) == 1 else None


def _meta(shape, dtype) -> str:
    return f"tensor(..., size={tuple(shape)}, dtype=flowserve.{dtype})"


def static_input_error(graph, names: list[str], expected: tuple, given: tuple) -> GraphError:
    """OneFlow's static-graph rule, naming the first input that differs."""
    for i, ((es, ed), (gs, gd)) in enumerate(zip(expected[1], given[1])):
        if es != gs or ed != gd:
            name = names[i] if i < len(names) else f"input_{i}"
            return GraphError(
                f"nn.Graph {graph.name} is a static graph: input {i} ({name!r}) was {_meta(es, ed)} when "
                f"the graph was compiled, got {_meta(gs, gd)}. Call the graph with the shapes and dtypes of "
                "its first call (only the batch dimension may change, where the graph allows it), or "
                "decorate __init__ with @nn.Graph.with_dynamic_input_shape() to compile one graph per "
                "input shape")
    return GraphError(f"nn.Graph {graph.name} was compiled for inputs structured as {expected[0]}, "
                      f"got {given[0]}")


def _match(a, b, ba: int, bb: int) -> bool:
    """``a`` (traced at batch ``ba``) equals ``b`` (at ``bb``) where every int that
    differs is the batch size of its trace."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b or (a == ba and b == bb)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_match(x, y, ba, bb) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_match(a[k], b[k], ba, bb) for k in a)
    return a == b


def _same_constant(a: np.ndarray, b: np.ndarray, ba: int, bb: int) -> bool:
    if not _match(list(a.shape), list(b.shape), ba, bb):
        return False
    if a.shape == b.shape:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)  # batch-sized constants: uniform and equal
    return flat_a.size > 0 and flat_b.size > 0 and bool((flat_a == flat_a[0]).all() and
                                                         (flat_b == flat_a[0]).all())


def batch_polymorphic(first, ba: int, other, bb: int) -> bool:
    """Whether traces ``first`` (batch ``ba``) and ``other`` (batch ``bb``) are one graph
    up to the batch size, lowerable with a symbolic batch axis."""
    ir1, ir2 = first.ir, other.ir
    if len(ir1.nodes) != len(ir2.nodes) or set(ir1.state) != set(ir2.state):
        return False
    for n1, n2 in zip(ir1.nodes, ir2.nodes):
        if n1.op != n2.op or n1.inputs != n2.inputs or n1.outputs != n2.outputs:
            return False
        if not _match(n1.attrs, n2.attrs, ba, bb):
            return False
        if n1.attrs != n2.attrs and n1.op not in BATCH_AWARE_OPS:
            return False
    for name, v1 in ir1.values.items():
        v2 = ir2.values.get(name)
        if v2 is None or v1.dtype != v2.dtype or not _match(list(v1.shape), list(v2.shape), ba, bb):
            return False
    for name, k in ir1.state_kinds.items():
        if k != "constant" and ir1.state[name].shape != ir2.state[name].shape:
            return False
    return all(n in other.constants and _same_constant(np.asarray(c), np.asarray(other.constants[n]), ba, bb)
               for n, c in first.constants.items())


class SignatureCache:
    """Compiled graphs by input signature, least recently used dropped beyond ``size``."""

    def __init__(self, size: int):
        if int(size) < 1:
            raise ValueError(f"with_dynamic_input_shape expects size >= 1, got {size}")
        self.size = int(size)
        self.entries: OrderedDict = OrderedDict()

    def get(self, key):
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def put(self, key, compiled) -> None:
        self.entries[key] = compiled
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
