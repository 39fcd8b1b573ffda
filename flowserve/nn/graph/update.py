"""The optimizer part of a training graph: unscale, check, and update every parameter.

Each optimizer's functional ``_update`` runs on lazy tensors, so the update becomes ops
of the graph; learning rates are fed per call (schedulers change them between calls).
With a grad scaler, gradients are divided by the loss scale, and when any of them is
inf/nan every parameter and optimizer state keeps its old value (``where``) and the
scaler's update shrinks the scale.
"""

from __future__ import annotations

from flowserve.amp.grad_scaler import found_non_finite
from flowserve.autograd.grad_mode import no_grad
from flowserve.nn.graph.fused_update import update_group
from flowserve.nn.graph.optimizer_reads import learning_rate_name
from flowserve.ops import functional as ops_functional
from flowserve.optim.optimizer import clip_group_grads


def _gradients(tracer, graph, scaler_state: dict) -> list:
    """``(optimizer, group, lr, [(param, lazy param, gradient)])`` per parameter group."""
    work = []
    for oi, (opt, _sched) in enumerate(graph.parts.optimizers):
        for gi, group in enumerate(opt.param_groups):
            lr_name = learning_rate_name(oi, gi)  # registered before build() (optimizer_reads)
            lr = tracer.state_named(lr_name)
            items = []
            for p in group["params"]:
                lazy_p = tracer.lazy_of(p)  # graph state: register_optimizer_reads refused any other
                if lazy_p.grad is None:
                    continue
                g = lazy_p.grad
                if "scale" in scaler_state:
                    g = g / scaler_state["scale"]
                items.append((p, lazy_p, g))
            clip_group_grads(group, [g for *_, g in items])
            work.append((opt, group, lr, lr_name, items))
    return work


def _snapshot(tensors: list) -> list:
    return [(t, t._lazy) for t in tensors]


def _keep_old_if(found_inf, snapshot: list, tracer) -> None:
    """Where ``found_inf``, every tensor of ``snapshot`` takes back its old value."""
    for t, old in snapshot:
        if t._lazy is not old:
            t.copy_(ops_functional.where(found_inf, tracer._lazy(old), t._alias()))


def _param_states(tracer, opt, group: dict, items: list) -> tuple[list, list]:
    """Each parameter's optimizer state as graph state; and every tensor the update writes."""
    states, touched = [], []
    for p, lazy_p, _ in items:
        # registered before build() (optimizer_reads), as build() left them
        state = {k: tracer.lazy_of(v) for k, v in opt.state_of(p, group).items()}
        states.append(state)
        touched += [lazy_p, *state.values()]
    return states, touched


def apply_optimizers(tracer, graph, scaler_state: dict) -> None:
    fuse = graph.config.options.get("fuse_model_update_ops", False)
    with no_grad():
        work = _gradients(tracer, graph, scaler_state)
        parallel = graph.parts.parallel  # made by the graph before its first trace (DataParallelStep.of)
        if parallel is not None:
            work = parallel.reduce_gradients(work)
        found_inf = None
        if graph.parts.grad_scaler is not None and graph.parts.grad_scaler.dynamic:
            found_inf = found_non_finite([g for *_, items in work for _, _, g in items])
            found_inf = parallel.agree(found_inf) if parallel is not None else found_inf
        zero = parallel.zero if parallel is not None else None  # ZeRO: a sharded update per group
        for opt, group, lr, lr_name, items in work:
            sharded = zero is not None and bool(items)
            if sharded:
                states = zero.states(tracer, opt, group, lr_name.removesuffix("-LearningRate"),
                                     [p for p, _, _ in items])
                touched = [lazy_p for _, lazy_p, _ in items] + list(states.values())
            else:
                states, touched = _param_states(tracer, opt, group, items)
            snapshot = _snapshot(touched) if found_inf is not None else []
            if sharded:
                zero.update(opt, group, lr, items, states)
            else:
                update_group(opt, group, lr, items, states, fuse)
            if found_inf is not None:
                _keep_old_if(found_inf, snapshot, tracer)
        if found_inf is not None:
            graph.parts.grad_scaler.graph_update(found_inf, scaler_state)
