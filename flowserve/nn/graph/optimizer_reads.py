"""What a training graph's ``build()`` reads of its optimizers, read on every call.

Before ``build()`` runs, each optimizer's per-parameter state (``opt.state[p]``: SGD's
momentum buffer, Adam's ``exp_avg`` and step count, made here when no update has made it
yet) becomes graph state, and each parameter group's learning rate a per-call input; while
``build()`` runs, ``param_groups[i]["lr"]`` holds that input as a 0-d tensor. So build() sees
the state before each call's update and the learning rate of each call, as an eager step
does, never their values when the graph was traced. Under ZeRO the per-parameter state
lives in shards the graph updates; reading it inside build() is an error. The groups' other
options (momentum, betas, weight decay, ...) are part of the compiled update: a call after
one of them changed is an error.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from flowserve.errors import GraphError
from flowserve.tensor import Tensor


def learning_rate_name(optimizer_index: int, group_index: int) -> str:
    return f"System-Optimizer-{optimizer_index}-Group-{group_index}-LearningRate"


def lr_feed(group: dict):
    """The group's learning rate as fed each call: float32, or float64 for float64 parameters
    (a float32 0.1 is 0.10000000149, an error a double model would carry into every step)."""
    double = any(p.dtype.name == "float64" for p in group["params"])
    return lambda: np.asarray(group["lr"], dtype=np.float64 if double else np.float32)


def _state_names(tracer) -> dict:
    """id(eager tensor) -> its name, for the tensors registered as graph state."""
    return {id(t): n for n, t in tracer.state_eager.items()}


ZERO_READ = ("with ZeRO the optimizer's state lives in shards that each rank updates; read it with "
             "graph.state_dict() outside build()")


def register_optimizer_reads(tracer, graph, system_feeds: dict) -> list:
    """Register every optimizer's learning rates and per-parameter state as graph state.
    Returns ``(optimizer, parameter)`` for each state made here (``forget_unused_state``)."""
    names = _state_names(tracer)
    parallel = graph.parts.parallel
    sharded = parallel is not None and parallel.zero is not None
    made = []
    for oi, (opt, _sched) in enumerate(graph.parts.optimizers):
        for gi, group in enumerate(opt.param_groups):
            name = learning_rate_name(oi, gi)
            system_feeds[name] = lr_feed(group)
            tracer.add_state(name, Tensor._wrap(system_feeds[name]()), "system")
            for p in group["params"]:
                if id(p) not in names:
                    continue  # the update refuses it, naming the parameter
                if p not in opt.state:
                    made.append((opt, p))
                _register_param_state(tracer, names[id(p)], opt, opt.state_of(p, group), sharded)
    return made


def _register_param_state(tracer, param_name: str, opt, state: dict, sharded: bool) -> None:
    """A parameter's state tensors as graph state (with ZeRO: refused; the shards are made
    from them). LBFGS keeps numbers there too; it runs eagerly only."""
    for key, t in state.items():
        if not isinstance(t, Tensor):
            continue
        if sharded:
            tracer.refuse_constant(t, ZERO_READ)
        else:
            tracer.add_state(f"{param_name}-{opt.graph_state_suffix(key)}", t, "optimizer")


def forget_unused_state(tracer, made: list, ir) -> None:  # before Traced.prune_state
    """Drop the states made for the trace of parameters the graph does not update (no
    gradient) and whose state build() did not read: eager steps would not have made them."""
    read = {name for node in ir.nodes for name in node.inputs} | {v.name for v in ir.outputs}
    names = _state_names(tracer)
    for opt, p in made:
        state = opt.state.get(p)  # ZeRO moved an updated parameter's state into its shard
        if state is None or tracer.lazy_of(p).grad is not None:
            continue
        state_names = [names[id(t)] for t in state.values() if id(t) in names]
        if not any(n in read for n in state_names):
            del opt.state[p]
            for name in state_names:
                del ir.state[name], ir.state_kinds[name], ir.values[name]


@contextmanager
def live_learning_rates(tracer, graph):
    """While build() runs, ``group["lr"]`` is the group's per-call learning rate."""
    swapped = []
    for oi, (opt, _sched) in enumerate(graph.parts.optimizers):
        for gi, group in enumerate(opt.param_groups):
            lazy = tracer.state_named(learning_rate_name(oi, gi))
            swapped.append((group, group["lr"], lazy))
            group["lr"] = lazy
    assigned = False
    try:
        yield
    finally:
        for group, value, lazy in swapped:  # a float set inside build() stays: it is fed from then on
            current = group["lr"]
            if isinstance(current, Tensor) and current.is_lazy:
                assigned = assigned or current is not lazy
                group["lr"] = value
    if assigned:
        raise GraphError(
            "nn.Graph.build assigned a value computed in the graph to a parameter group's learning rate; "
            "a graph reads the learning rate from param_groups on every call: set it outside build(), "
            "or with an LR scheduler (graph.add_optimizer(opt, lr_sch=...))")


def optimizer_options(graph) -> tuple:
    """Each parameter group's options but its parameters and learning rate, as the update
    compiled into a graph uses them: ``((optimizer index, group index, options), ...)``."""
    return tuple((oi, gi, {k: v for k, v in group.items() if k not in ("params", "lr")})
                 for oi, (opt, _sched) in enumerate(graph.parts.optimizers)
                 for gi, group in enumerate(opt.param_groups))


def check_options_unchanged(graph, traced: tuple) -> None:
    """A clear error where a group's option (momentum, betas, weight decay, ...) changed after
    the trace: the compiled update keeps the traced value, eager mode would use the new one."""
    for oi, gi, options in traced:
        group = graph.parts.optimizers[oi][0].param_groups[gi]
        for key, old in options.items():
            new = group.get(key)
            if not _same(old, new):
                raise GraphError(
                    f"nn.Graph {graph.name} was traced with optimizer {oi}'s param_groups[{gi}][{key!r}] = {old!r}, "
                    f"now {new!r}: the update compiled into the graph keeps the traced options (only the learning "
                    "rate is fed on every call); build a new nn.Graph to train with the new value")


def _same(old, new) -> bool:
    if isinstance(old, Tensor) or isinstance(new, Tensor):
        return old is new
    return old == new
