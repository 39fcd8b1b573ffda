"""Tracing ``build()`` into a ``GraphIR``: inputs, state, optimizer updates, outputs."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from flowserve.autograd.grad_mode import no_grad, set_grad_enabled
from flowserve.errors import GraphError
from flowserve.ir.graph import GraphIR
from flowserve.ir.passes import eliminate_dead_code, name_outputs
from flowserve.ir.tracer import Tracer
from flowserve.tensor import Tensor
from flowserve.utils.tree import flatten, leaf_names, unflatten

TRAIN_STEP = "System-Train-TrainStep"


@dataclass
class Traced:
    """A traced build: the IR, the eager tensors behind its state, how to feed it."""

    ir: GraphIR
    constants: dict
    state: dict  # state name -> eager tensor (parameters, buffers, optimizer state, train step)
    system_feeds: dict = field(default_factory=dict)  # state name -> () -> value (learning rates)
    in_spec: object = None
    out_spec: object = None
    module_calls: list = field(default_factory=list)


def input_names(build, leaves_count: int, spec) -> list[str]:
    """Names of the flattened inputs: build()'s parameter names where one input each."""
    params = [p for p in inspect.signature(build).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    args_spec = spec[1][0][1]  # spec of (args, kwargs) -> args list
    names, used = [], set()
    for i, s in enumerate(args_spec):
        base = params[i].name if i < len(params) else f"input_{i}"
        sub = leaf_names(s, base)
        if s[0] != "leaf":
            sub = [f"{base}.{j}" for j in range(len(sub))]
        names += sub
    for k, s in spec[1][1][1]:
        names += [k] if s[0] == "leaf" else [f"{k}.{j}" for j in range(len(leaf_names(s)))]
    for i, n in enumerate(names):
        if n in used:
            names[i] = f"{n}_{i}"
        used.add(names[i])
    if len(names) != leaves_count:
        raise GraphError(f"could not name the {leaves_count} graph inputs")
    return names


def register_state(tracer: Tracer, graph) -> None:
    seen = set()
    for attr, module in graph._original_modules().items():
        for name, p in module.named_parameters(prefix=attr):
            if id(p) not in seen:
                seen.add(id(p))
                tracer.add_state(name, p, "parameter")
        for name, b in module.named_buffers(prefix=attr):
            if id(b) not in seen:
                seen.add(id(b))
                tracer.add_state(name, b, "buffer")


def apply_optimizers(tracer: Tracer, graph, system_feeds: dict) -> None:
    names = {id(t): n for n, t in tracer.state_eager.items()}
    for oi, (opt, _sched) in enumerate(graph._optimizers):
        for gi, group in enumerate(opt.param_groups):
            lr_name = f"System-Optimizer-{oi}-Group-{gi}-LearningRate"
            lr = tracer.add_state(lr_name, Tensor._wrap(_f32(group["lr"])), "system")
            system_feeds[lr_name] = (lambda g=group: _f32(g["lr"]))
            for p in group["params"]:
                lazy_p = tracer.lazy_of(p)
                if lazy_p is None:
                    raise GraphError("an optimizer added to the graph updates a parameter that no module "
                                     "of the graph holds")
                if lazy_p.grad is None:
                    continue
                state = {k: tracer.add_state(f"{names[id(p)]}-{opt.graph_state_suffix(k)}", v, "optimizer")
                         for k, v in opt.state_of(p, group).items()}
                with no_grad():
                    opt._update(lazy_p, lazy_p.grad, state, group, lr)


def _f32(x):
    import numpy as np

    return np.asarray(x, dtype=np.float32)


def trace_build(graph, args: tuple, kwargs: dict, names: list[str] | None = None) -> Traced:
    leaves, spec = flatten((args, kwargs))
    names = names or input_names(graph.build, len(leaves), spec)
    tracer = Tracer(graph.name)
    tracer.module_names = graph._module_names()
    system_feeds: dict = {}
    with tracer, set_grad_enabled(graph.training):
        lazy_inputs = [tracer.add_input(n, t.meta) for n, t in zip(names, leaves)]
        register_state(tracer, graph)
        lazy_args, lazy_kwargs = unflatten(spec, lazy_inputs)
        graph._on_build_start(tracer)
        out = graph.build(*lazy_args, **lazy_kwargs)
        if graph.training:
            apply_optimizers(tracer, graph, system_feeds)
            step = tracer.add_state(TRAIN_STEP, graph._train_step, "system")
            with no_grad():
                step.copy_(step + 1)
        out_leaves, out_spec = flatten(out)
        out_leaves = [tracer.lift(t) for t in out_leaves]
    ir = tracer.ir
    ir.updates = tracer.state_updates()
    name_outputs(ir, [t._lazy.name for t in out_leaves], leaf_names(out_spec))
    eliminate_dead_code(ir)
    state = {k: v for k, v in tracer.state_eager.items() if k in ir.state}
    constants = {k: v for k, v in tracer.constants.items() if k in ir.state}
    return Traced(ir, constants, state, system_feeds, spec, out_spec, tracer.module_calls)
