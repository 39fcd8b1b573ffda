"""What a training graph's ``build()`` reads of its optimizers and their learning-rate
schedulers, read on every call.

Before ``build()`` runs, each optimizer's per-parameter state (``opt.state[p]``: SGD's
momentum buffer, Adam's ``exp_avg`` and step count, made here when no update has made it
yet) becomes graph state, and each parameter group's learning rate a per-call input; while
``build()`` runs, ``param_groups[i]["lr"]`` holds that input as a 0-d tensor. The numbers of
each scheduler made for those optimizers (attached with ``add_optimizer(opt, lr_sch=...)``
or stepped by the user between calls): ``get_last_lr()``, ``last_epoch``, ``base_lrs``, its
options, become per-call inputs the same way, those build() did not read dropped again.
So build() sees the state before each call's update and the learning rate and schedule of
each call, as an eager step does, never their values when the graph was traced. Under ZeRO
the per-parameter state lives in shards the graph updates; reading it inside build() is an
error. The groups' other options (momentum, betas, weight decay, ...) are part of the
compiled update: a call after one of them changed is an error.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np

from flowserve import env
from flowserve.errors import GraphError
from flowserve.tensor import Tensor


def learning_rate_name(optimizer_index: int, group_index: int) -> str:
    return f"System-Optimizer-{optimizer_index}-Group-{group_index}-LearningRate"


def _float_of(params) -> type:
    """The dtype a learning rate is fed in: float32, or float64 for float64 parameters (a
    float32 0.1 is 0.10000000149, an error a double model would carry into every step)."""
    return np.float64 if any(p.dtype.name == "float64" for p in params) else np.float32


def lr_feed(group: dict):
    """The group's learning rate as fed each call (float32, float64 for float64 parameters)."""
    dtype = _float_of(group["params"])
    return lambda: np.asarray(group["lr"], dtype=dtype)


def add_feed(tracer, system_feeds: dict, name: str, feed):
    """A per-call input of the graph, ``name``, given ``feed()`` before every call; returns
    its lazy value (what build() reads)."""
    system_feeds[name] = feed
    return tracer.add_state(name, Tensor._wrap(feed()), "system")


def _state_names(tracer) -> dict:
    """id(eager tensor) -> its name, for the tensors registered as graph state (a global
    tensor under its own id and its local piece's)."""
    return tracer.state_names


ZERO_READ = ("with ZeRO the optimizer's state lives in shards that each rank updates; read it with "
             "graph.state_dict() outside build()")


@dataclass
class OptimizerReads:
    """What ``register_optimizer_reads`` made: ``made``, ``(optimizer, parameter)`` for each
    state made for the trace (``forget_unused_state``); ``schedulers``, ``(scheduler, {attribute:
    lazy value or list of them})`` put in place while build() runs (``live_reads``)."""

    made: list = field(default_factory=list)
    schedulers: list = field(default_factory=list)


def register_optimizer_reads(tracer, graph, system_feeds: dict) -> OptimizerReads:
    """Register every optimizer's learning rates and per-parameter state, and its schedulers'
    numbers, as graph state."""
    names = _state_names(tracer)
    parallel = graph.parts.parallel
    sharded = parallel is not None and parallel.zero is not None
    reads = OptimizerReads()
    made = reads.made
    for oi, (opt, _sched) in enumerate(graph.parts.optimizers):
        for gi, group in enumerate(opt.param_groups):
            add_feed(tracer, system_feeds, learning_rate_name(oi, gi), lr_feed(group))
            for p in group["params"]:
                if id(p) not in names:
                    raise GraphError(
                        f"optimizer {oi} added to nn.Graph {graph.name} updates a tensor of size "
                        f"{tuple(p.shape)} (param_groups[{gi}]) that no module of the graph holds: the graph "
                        "would read it as a constant and never update it; make it an nn.Parameter of a "
                        "module the graph holds")
                if p not in opt.state:
                    made.append((opt, p))
                with tracer.eagerly():  # eager tensors, kept after the trace
                    state = opt.state_of(p, group)
                _register_param_state(tracer, names[id(p)], opt, state, sharded)
    for oi, si, scheduler in graph_schedulers(graph):
        reads.schedulers.append((scheduler, _register_scheduler(tracer, system_feeds, oi, si, scheduler)))
    return reads


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


# -- learning-rate schedulers ------------------------------------------------------------------

RATE_LISTS = ("base_lrs", "_last_lr")  # a scheduler's lists of learning rates, one per group


def graph_schedulers(graph) -> list:
    """``(optimizer index, scheduler index, scheduler)`` for each scheduler build() may read:
    the schedulers made for the graph's optimizers, oldest first, and an attached one that is
    not among them (a scheduler of another class, with ``step`` and ``optimizer``)."""
    out = []
    for oi, (opt, attached) in enumerate(graph.parts.optimizers):
        schedulers = opt.lr_schedulers()
        if attached is not None and not any(s is attached for s in schedulers):
            schedulers.append(attached)
        out += [(oi, si, s) for si, s in enumerate(schedulers)]
    return out


def scheduler_value_name(optimizer_index: int, scheduler_index: int, key: str, index: int | None) -> str:
    tail = "" if index is None else f"-{index}"
    return f"System-Optimizer-{optimizer_index}-Scheduler-{scheduler_index}-{key}{tail}"


def _is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _scheduler_numbers(scheduler) -> dict:
    """The scheduler's numbers by attribute: ints, floats and non-empty lists of them."""
    return {key: value for key, value in vars(scheduler).items()
            if _is_number(value) or (isinstance(value, (list, tuple)) and value and all(map(_is_number, value)))}


def _register_scheduler(tracer, system_feeds: dict, oi: int, si: int, scheduler) -> dict:
    """Each number of ``scheduler`` as a per-call input; returns what build() reads in its place."""
    live = {}
    for key, value in _scheduler_numbers(scheduler).items():
        listed = isinstance(value, (list, tuple))
        lazies = []
        for i, item in enumerate(value if listed else [value]):
            index = i if listed else None
            feed = _scheduler_feed(scheduler, key, index, _feed_dtype(scheduler, key, index, item))
            lazies.append(add_feed(tracer, system_feeds, scheduler_value_name(oi, si, key, index), feed))
        live[key] = type(value)(lazies) if listed else lazies[0]
    return live


def _feed_dtype(scheduler, key: str, index: int | None, item) -> type:
    """int64 for an integer (``last_epoch``); for a learning rate of a group, its group's
    float; for other floats float32, float64 where every parameter is float64."""
    groups = scheduler.optimizer.param_groups
    if key in RATE_LISTS and index is not None and index < len(groups):
        return _float_of(groups[index]["params"])
    if isinstance(item, Integral) and key not in RATE_LISTS:
        return np.int64
    return np.float64 if all(_float_of(g["params"]) is np.float64 for g in groups) else np.float32


def _scheduler_feed(scheduler, key: str, index: int | None, dtype):
    """``scheduler.<key>[index]`` as fed on each call, checked to be still the kind of number
    the graph was traced with."""
    what = f"{type(scheduler).__name__}.{key}" + ("" if index is None else f"[{index}]")

    def feed():
        value = vars(scheduler).get(key)
        if index is not None:
            value = value[index] if isinstance(value, (list, tuple)) and index < len(value) else None
        integral = np.issubdtype(dtype, np.integer)
        if not _is_number(value) or (integral and value != int(value)):
            kind = "an integer" if integral else "a number"
            raise GraphError(f"a graph whose build() read {what} was traced when it was {kind}; it is now "
                             f"{value!r}: build a new nn.Graph for it")
        return np.asarray(value, dtype=dtype)

    return feed


def forget_unused_state(tracer, reads: OptimizerReads, ir) -> None:  # before Traced.prune_state
    """Drop the states made for the trace of parameters the graph does not update (no
    gradient) and whose state build() did not read: eager steps would not have made them;
    and the scheduler numbers build() did not read."""
    read = {name for node in ir.nodes for name in node.inputs} | {v.name for v in ir.outputs}
    for _scheduler, live in reads.schedulers:
        for value in live.values():
            for lazy in value if isinstance(value, (list, tuple)) else [value]:
                if lazy._lazy.name not in read:
                    _drop_state(ir, lazy._lazy.name)
    names = _state_names(tracer)
    for opt, p in reads.made:
        state = opt.state.get(p)  # ZeRO moved an updated parameter's state into its shard
        if state is None or tracer.lazy_of(p).grad is not None:
            continue
        state_names = [names[id(t)] for t in state.values() if id(t) in names]
        if not any(n in read for n in state_names):
            del opt.state[p]
            for name in state_names:
                _drop_state(ir, name)


def _drop_state(ir, name: str) -> None:
    del ir.state[name], ir.state_kinds[name], ir.values[name]


@contextmanager
def live_reads(tracer, graph, reads: OptimizerReads):
    """While build() runs, ``group["lr"]`` is the group's per-call learning rate, and each
    scheduler's numbers are its per-call values."""
    with live_learning_rates(tracer, graph), _live_schedulers(reads.schedulers):
        yield


@contextmanager
def _live_schedulers(schedulers: list):
    saved = []
    for scheduler, live in schedulers:
        saved.append((scheduler, {key: vars(scheduler)[key] for key in live}, live))
        vars(scheduler).update(live)
    changed = []
    try:
        yield
    finally:
        for scheduler, values, live in reversed(saved):
            state = vars(scheduler)
            changed += [f"{type(scheduler).__name__}.{key}" for key in live if not _same_live(state.get(key), live[key])]
            state.update(values)
    if changed:
        raise GraphError(
            f"nn.Graph.build changed {', '.join(changed)}: a graph steps a scheduler between calls, not inside "
            "build(); attach it with graph.add_optimizer(opt, lr_sch=scheduler), or step it after each call")


def _same_live(current, live) -> bool:
    if isinstance(live, (list, tuple)):
        return (isinstance(current, (list, tuple)) and len(current) == len(live)
                and all(a is b for a, b in zip(current, live)))
    return current is live


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


def print_verbose_learning_rates(graph) -> None:
    """OneFlow's ``verbose=True`` of a scheduler attached with ``add_optimizer(opt, lr_sch=...)``:
    before each training call, rank 0 prints the learning rate the call trains with, a line per
    parameter group of that optimizer, as OneFlow's graph does (``Last step 0 adjusting learning
    rate to 0.1``, the step counted from 0)."""
    if env.get_rank() != 0:
        return
    step = None
    for opt, scheduler in graph.parts.optimizers:
        if scheduler is None or not scheduler.verbose:
            continue
        step = int(graph.parts.train_step.item()) if step is None else step
        for group in opt.param_groups:
            print(f"Last step {step} adjusting learning rate to {np.float32(group['lr']):g}")


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
