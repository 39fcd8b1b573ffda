"""The deployable part of a graph (the ``deploy`` stage of ``flowserve.nn.graph.lifecycle``):
for an inference graph, the trace its calls made; for a training graph, its model traced
once in eval mode. ``deployable_state`` gathers what ``flow.save`` and export write."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flowserve import dtypes
from flowserve.autograd.grad_mode import no_grad
from flowserve.device import CPU, to_device_array
from flowserve.errors import GraphError
from flowserve.nn.graph.batching import batch_from_marks
from flowserve.nn.graph.named_dims import check_named_dims, grown_shapes, normalize, retrace_failure, verify_lowering
from flowserve.nn.graph.lifecycle import trace_and_rewrite
from flowserve.nn.graph.proxy import ProxyModule
from flowserve.nn.graph.trace import Traced
from flowserve.nn.module import Module
from flowserve.nn.modules.loss import _Loss
from flowserve.ops.creation import zeros
from flowserve.utils.tree import unflatten

if TYPE_CHECKING:
    from flowserve.nn.graph.graph import Graph


def inference_traced(graph: "Graph", model=None, shapes: dict | None = None) -> Traced:
    """The inference trace of ``graph``: its own trace when it has no optimizer (no
    ``build()`` runs), else the trace of its deployable module in eval mode, without grads.
    That module is ``model`` (``flow.save(graph, dir, model=graph.model)``), else what
    ``graph.deploy()`` returns, else the last top-level module ``build()`` called that is
    not a loss. With ``shapes`` (input name -> shape), traced again on zero inputs of those
    shapes (the named-dims check of ``flow.save``)."""
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
        if shapes is None:
            return compiled.traced
        samples = [_sample(v, shapes) for v in compiled.traced.ir.inputs]
        args, kwargs = unflatten(compiled.traced.in_spec, samples)
        return graph.trace_quietly(args, kwargs)
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
    samples = [_sample(a._lazy, shapes) for a in args]
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        with no_grad():
            return trace_and_rewrite(graph.module_graph(attr, module), tuple(samples), {}, names)
    finally:
        for m, mode in modes.items():
            object.__setattr__(m, "training", mode)


def _deployed_call(graph: "Graph", traced: Traced, chosen) -> tuple:
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
            attrs = ", ".join(repr(name) for name in graph.original_modules()) or "none"
            raise GraphError(f"the module to deploy ({type(module).__name__}) is not a top-level module that "
                             f"build() of {graph.name} calls (its modules: {attrs})")
    attr, module, args, _ = calls[-1]
    return attr, module, args


def _sample(value, shapes: dict | None = None):
    """Zeros of a traced value's shape and dtype (the shape ``shapes`` gives for its
    name, when it does)."""
    shape = [int(d) for d in (shapes or {}).get(value.name, value.shape)]
    return zeros(*shape, dtype=dtypes.from_name(value.dtype))


@dataclass
class DeployableState:
    """What saving or exporting a graph writes, read from its traces: the deployed
    inference trace (IR, parameters, buffers, constants), its batch size where it stays
    dynamic (``batch``; None: static, with ``batch_note`` saying why where the marks show
    it), the named dynamic dims, the arrays to store (for a training graph also what
    resuming needs: optimizer state and the step, without this rank's ZeRO shards), and
    the graph's name, class, mode, config and recent inputs (reference examples)."""

    traced: Traced
    batch: int | None
    batch_note: str | None
    dynamic_dims: dict
    arrays: dict
    name: str
    graph_class: str
    training: bool
    config: dict
    recent_inputs: list = field(default_factory=list)

    @property
    def ir(self):
        return self.traced.ir


def deployable_state(graph: "Graph", model=None, dynamic_dims: dict | None = None) -> DeployableState:
    """``graph``'s ``DeployableState``: an inference graph's own trace (no ``build()``),
    a training graph's deployed module traced once in eval mode; the batch from the trace's
    marks; ``dynamic_dims`` checked by one more trace with every named dim one larger."""
    traced = inference_traced(graph, model)
    named = normalize(dynamic_dims, traced.ir) if dynamic_dims else {}
    if named:
        try:
            other = inference_traced(graph, model, shapes=grown_shapes(traced.ir, named))
        except Exception as exc:  # build() cannot run at other sizes: it fixes them
            raise retrace_failure(exc, traced.ir, named) from None
        named = check_named_dims(traced, other, named)
        verify_lowering(traced, other, named)
    inputs = {v.name for v in traced.ir.inputs}
    if any(0 in axes for t, axes in named.items() if t in inputs):  # named dims at axis 0: no separate batch
        batch, note = None, None
    else:
        batch, note = batch_from_marks(traced)
    arrays = {k: t.numpy() for k, t in traced.state.items()}
    arrays.update(traced.constants)
    if graph.training:
        parallel = graph.parts.parallel
        local = parallel.rank_local_state() if parallel is not None else set()
        for name, t in graph.parts.traced.state.items():
            if name not in local:  # (a ZeRO shard is this rank's part, not the graph's state)
                arrays.setdefault(name, t.numpy())
    recent = [] if graph.training else [tuple(to_device_array(a, CPU) for a in call)
                                        for call in graph.parts.recent_inputs]
    return DeployableState(traced, batch, note, named, arrays, graph.name, type(graph).__name__, graph.training,
                           dict(graph.config.options), recent)
