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

from flowserve.errors import GraphError

DEVICE_ENTRIES = 8  # batch sizes a training graph lowered for CUDA keeps compiled (graph._compiled_for)



def signature(leaves: list, spec) -> tuple:
    return (repr(spec), tuple((tuple(t.shape), t.dtype.name) for t in leaves))


def same_but_batch(a: tuple, b: tuple) -> bool:
    """Whether signatures ``a`` and ``b`` differ in dim 0 of their inputs at most."""
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(
        ed == gd and es[1:] == gs[1:] and len(es) == len(gs) for (es, ed), (gs, gd) in zip(a[1], b[1]))


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
