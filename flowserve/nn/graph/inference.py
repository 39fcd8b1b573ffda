"""The deployable part of a graph: for a training graph, its model traced in eval mode."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.autograd.grad_mode import no_grad
from flowserve.errors import GraphError
from flowserve.nn.graph.batching import batch_mismatch, failure_origin
from flowserve.nn.graph.graph import Graph
from flowserve.nn.graph.proxy import ProxyModule
from flowserve.nn.graph.trace import Traced, trace_build
from flowserve.nn.module import Module
from flowserve.nn.modules.loss import _Loss
from flowserve.ops.creation import zeros
from flowserve.utils.tree import unflatten


class _ModelGraph(Graph):
    """Wraps one module of a training graph under the same attribute name."""

    def __init__(self, attr: str, module: Module, name: str):
        super().__init__()
        setattr(self, attr, module)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_attr", attr)

    def build(self, *args):
        return getattr(self, self._attr)(*args)


def inference_traced(graph: Graph, model=None, batch: int | None = None, shapes: dict | None = None) -> Traced:
    """The inference trace of ``graph``: its own trace when it has no optimizer, else the
    trace of its deployable module in eval mode, without grads. That module is ``model``
    (``flow.save(graph, dir, model=graph.model)``), else what ``graph.deploy()`` returns,
    else the last top-level module ``build()`` called that is not a loss. With ``batch``,
    traced again on zero inputs of that batch size (the batch check of ``flow.save``); with
    ``shapes`` (input name -> shape), on zero inputs of those shapes (its named-dims check)."""
    compiled = graph.parts.last
    if compiled is None:
        raise GraphError(f"(GRAPH:{graph.name}:{type(graph).__name__}) has not been compiled; the graph must be "
                         "compiled first. You can call the graph once on sample inputs to trigger its "
                         "compilation (flow.save and export use what that call traced).")
    chosen = model if model is not None else graph.deploy()
    if not graph.training:
        if chosen is not None:
            raise GraphError(f"{graph.name} is an inference graph: it deploys its own build(); "
                             "model= and deploy() choose a module of a training graph only")
        if batch is None and shapes is None:
            return compiled.traced
        samples = [_sample(v, batch, shapes) for v in compiled.traced.ir.inputs]
        args, kwargs = unflatten(compiled.traced.in_spec, samples)
        return graph._traced_quietly(trace_build, args, kwargs)
    traced = compiled.traced
    attr, module, args = _deployed_call(graph, traced, chosen)
    inputs = {v.name for v in traced.ir.inputs}
    names = []
    for a in args:
        name = getattr(getattr(a, "_lazy", None), "name", None)
        if name not in inputs:
            raise GraphError(f"module {attr!r} of {graph.name} is called on a computed tensor; to deploy it, "
                             "its inputs must be inputs of build()")
        names.append(name)
    samples = [_sample(a._lazy, batch, shapes) for a in args]
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        with no_grad():
            return trace_build(_ModelGraph(attr, module, graph.name), tuple(samples), {}, names)
    finally:
        for m, mode in modes.items():
            object.__setattr__(m, "training", mode)


def _deployed_call(graph: Graph, traced: Traced, chosen) -> tuple:
    """(attribute name, module, lazy args) of the build() call of the module to deploy."""
    top = [c for c in traced.module_calls if "." not in c[0]]
    if chosen is None:
        calls = [c for c in top if not isinstance(c[1], _Loss)]
        if not calls:
            raise GraphError(f"training graph {graph.name} calls no model module in build(); nothing to deploy")
    else:
        module = chosen.to(Module) if isinstance(chosen, ProxyModule) else chosen
        if not isinstance(module, Module):
            raise GraphError(f"the module to deploy must be an nn.Module of {graph.name} (e.g. graph.model), "
                             f"got {type(chosen).__name__}")
        calls = [c for c in top if c[1] is module]
        if not calls:
            attrs = ", ".join(repr(name) for name in graph._modules) or "none"
            raise GraphError(f"the module to deploy ({type(module).__name__}) is not a top-level module that "
                             f"build() of {graph.name} calls (its modules: {attrs})")
    attr, module, args, _ = calls[-1]
    return attr, module, args


def _sample(value, batch: int | None = None, shapes: dict | None = None):
    """Zeros of a traced value's shape and dtype (dim 0 = ``batch`` when given; the shape
    ``shapes`` gives for its name, when it does)."""
    shape = [int(d) for d in (shapes or {}).get(value.name, value.shape)]
    if batch is not None and shape:
        shape[0] = batch
    return zeros(*shape, dtype=dtypes.from_name(value.dtype))


def deployable_batch(graph, traced, model=None) -> tuple[int | None, str | None]:
    """``(batch, None)`` when the deployable trace ``traced`` of ``graph`` runs at any batch
    size (its inputs share dim 0 and a trace at another batch size agrees), else
    ``(None, reason)``; ``(None, None)`` when the inputs share no batch dim."""
    ir = traced.ir
    firsts = {v.shape[0] if v.shape else None for v in ir.inputs}
    if len(firsts) != 1 or None in firsts:
        return None, None
    batch = int(firsts.pop())
    failure = None
    for other_batch in (batch + 1, 2 * batch):  # 2 * batch: for a build() that splits the batch (B // 2)
        try:
            other = inference_traced(graph, model, other_batch)
        except Exception as exc:  # build() itself cannot run at this batch size
            failure = failure or failure_origin(exc, batch, other_batch)
            continue
        reason = batch_mismatch(traced, batch, other, other_batch)
        return (batch, None) if reason is None else (None, reason)
    return None, failure
