"""The deployable part of a graph: for a training graph, its model traced in eval mode."""

from __future__ import annotations

from flowserve.autograd.grad_mode import no_grad
from flowserve.errors import GraphError
from flowserve.nn.graph.graph import Graph
from flowserve.nn.graph.trace import Traced, trace_build
from flowserve.nn.module import Module
from flowserve.nn.modules.loss import _Loss
from flowserve.ops.creation import zeros


class _ModelGraph(Graph):
    """Wraps one module of a training graph under the same attribute name."""

    def __init__(self, attr: str, module: Module, name: str):
        super().__init__()
        setattr(self, attr, module)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_attr", attr)

    def build(self, *args):
        return getattr(self, self._attr)(*args)


def inference_traced(graph: Graph) -> Traced:
    """The inference trace of ``graph``: its own trace when it has no optimizer, else the
    trace of the last top-level non-loss module it called, in eval mode, without grads."""
    compiled = graph._last
    if compiled is None:
        raise GraphError(f"(GRAPH:{graph.name}:{type(graph).__name__}) has not been compiled; the graph must be "
                         "compiled first. You can call the graph once on sample inputs to trigger its "
                         "compilation (flow.save and export use what that call traced).")
    if not graph.training:
        return compiled.traced
    traced = compiled.traced
    calls = [c for c in traced.module_calls if "." not in c[0] and not isinstance(c[1], _Loss)]
    if not calls:
        raise GraphError(f"training graph {graph.name} calls no model module in build(); nothing to deploy")
    attr, module, args, _ = calls[-1]
    inputs = {v.name for v in traced.ir.inputs}
    names = []
    for a in args:
        name = getattr(getattr(a, "_lazy", None), "name", None)
        if name not in inputs:
            raise GraphError(f"module {attr!r} of {graph.name} is called on a computed tensor; to deploy it, "
                             "its inputs must be inputs of build()")
        names.append(name)
    samples = [_sample(a) for a in args]
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        with no_grad():
            return trace_build(_ModelGraph(attr, module, graph.name), tuple(samples), {}, names)
    finally:
        for m, mode in modes.items():
            object.__setattr__(m, "training", mode)


def _sample(lazy):

    return zeros(*lazy.shape, dtype=lazy.dtype)
