"""OneFlow's optimizer rules inside an nn.Graph training graph: the compiled update gives the
numbers of OneFlow's formula (numpy, ``tests/core/oneflow_optim_formulas``) after every
step, as eager mode does (``tests/core/test_optim_oneflow.py``): Adam/AdamW without bias
correction, RMSprop's eps, SGD's dampening/Nesterov/maximize, LAMB (added with
``graph.add_optimizer``, its state saved and resumed), and a CosineAnnealingWarmRestarts
schedule with ``decay_rate`` attached to the graph."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
from tests.core import oneflow_optim_formulas as oneflow
from tests.core.test_optim_oneflow import ADAM, LAMB, RMSPROP, SGD, _ids, assert_steps_close, expected, values


class Masked(flow.nn.Module):
    """``sum(p_i * mask_i)``: the gradient of each parameter is its mask."""

    def __init__(self, params):
        super().__init__()
        self.p0 = flow.nn.Parameter(flow.tensor(params[0].copy()))
        self.p1 = flow.nn.Parameter(flow.tensor(params[1].copy()))

    def forward(self, m0, m1):
        return (self.p0 * m0).sum() + (self.p1 * m1).sum()


class TrainGraph(flow.nn.Graph):
    def __init__(self, model, optimizer, scheduler=None, fuse=False):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer, lr_sch=scheduler)
        self.config.allow_fuse_model_update_ops(fuse)

    def build(self, m0, m1):
        loss = self.model(m0, m1)
        loss.backward()
        return loss


def train_graph(name, options, params, grads, scheduler=None):
    model = Masked(params)
    opt = getattr(flow.optim, name)(model.parameters(), **options)
    graph = TrainGraph(model, opt, scheduler(opt) if scheduler else None)
    history = []
    for g0, g1 in grads:
        graph(flow.tensor(g0), flow.tensor(g1))
        history.append([model.p0.numpy().copy(), model.p1.numpy().copy()])
    return history, graph, opt


@pytest.mark.parametrize("name,options", ADAM, ids=_ids(ADAM))
def test_graph_adam_without_bias_correction(name, options):
    params, grads = values()
    history, _, _ = train_graph(name, options, params, grads)
    assert_steps_close(history, expected(oneflow.adam, {**options, "decoupled": name == "AdamW"}, params, grads))


@pytest.mark.parametrize("options", SGD, ids=_ids([("SGD", o) for o in SGD]))
def test_graph_sgd_follows_oneflow(options):
    params, grads = values()
    history, _, _ = train_graph("SGD", options, params, grads)
    assert_steps_close(history, expected(oneflow.sgd, options, params, grads))


@pytest.mark.parametrize("options", RMSPROP, ids=_ids([("RMSprop", o) for o in RMSPROP]))
def test_graph_rmsprop_puts_eps_inside_the_square_root(options):
    params, grads = values()
    history, _, _ = train_graph("RMSprop", options, params, grads)
    assert_steps_close(history, expected(oneflow.rmsprop, options, params, grads))


@pytest.mark.parametrize("options", LAMB, ids=_ids([("LAMB", o) for o in LAMB]))
def test_graph_lamb_follows_oneflow(options):
    params, grads = values(zero_first=True)
    history, _, opt = train_graph("LAMB", options, params, grads)
    assert_steps_close(history, expected(oneflow.lamb, options, params, grads))
    assert opt.state_dict()["state"][0]["step"].item() == len(grads)  # the graph wrote its state back


def test_graph_lamb_state_saves_and_resumes(tmp_path):
    """Two graph steps, graph.state_dict() through flow.save/flow.load into a fresh graph,
    two more: OneFlow's four uninterrupted steps; the state has OneFlow's names."""
    options = dict(lr=0.1, betas=(0.8, 0.9), weight_decay=0.1)
    params, grads = values()
    _, graph, _ = train_graph("LAMB", options, params, grads[:2])
    state = graph.state_dict()
    assert {"model.p0-m", "model.p0-v", "model.p1-step"} <= {k for k in state if "-" in k}
    flow.save(state, str(tmp_path / "graph.state"))
    model = Masked(params)
    fresh = TrainGraph(model, flow.optim.LAMB(model.parameters(), **options))
    fresh.load_state_dict(flow.load(str(tmp_path / "graph.state")))
    for g0, g1 in grads[2:]:
        fresh(flow.tensor(g0), flow.tensor(g1))
    final = expected(oneflow.lamb, options, params, grads)[-1]
    assert_steps_close([[model.p0.numpy(), model.p1.numpy()]], [final])


def test_graph_lamb_keeps_its_trust_ratios_under_a_fused_update():
    """A fused model update concatenates small parameters; LAMB's trust ratio is each
    parameter's own, so its parameters update one by one and give OneFlow's numbers."""
    options = dict(lr=0.1, weight_decay=0.1)
    params, grads = values()
    model = Masked(params)
    graph = TrainGraph(model, flow.optim.LAMB(model.parameters(), **options), fuse=True)
    history = []
    for g0, g1 in grads:
        graph(flow.tensor(g0), flow.tensor(g1))
        history.append([model.p0.numpy().copy(), model.p1.numpy().copy()])
    assert_steps_close(history, expected(oneflow.lamb, options, params, grads))


def test_graph_schedule_with_warm_restarts_decay():
    """SGD under CosineAnnealingWarmRestarts(decay_rate, restart_limit) attached to the graph:
    each call's update uses OneFlow's lr of that step."""
    params, grads = values(steps=7)
    sched_options = dict(T_0=2, T_mult=2, eta_min=0.01, decay_rate=0.5, restart_limit=2)
    make = lambda opt: flow.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, **sched_options)  # noqa: E731
    history, _, opt = train_graph("SGD", dict(lr=1.0, momentum=0.5), params, grads, scheduler=make)
    lrs = [oneflow.warm_restarts_lr(1.0, step, **sched_options) for step in range(len(grads) + 1)]
    reference = []
    for i, p in enumerate(params):  # momentum SGD with the lr of each step
        p, buf, steps = p.astype(np.float64), 0.0, []
        for lr, step in zip(lrs, grads):
            buf = 0.5 * buf + step[i]
            p = p - lr * buf
            steps.append(p)
        reference.append(steps)
    assert_steps_close(history, [list(s) for s in zip(*reference)])
    assert opt.param_groups[0]["lr"] == pytest.approx(lrs[len(grads)])
