"""Every optimizer (and scheduler) inside an nn.Graph training graph equals eager training:
loss and parameters after each of 5 steps, and the eager module holds the graph's values."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow

RTOL = 1e-5
STEPS = 5

OPTIMIZERS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True)),
    ("Adam", dict(lr=1e-2, weight_decay=0.05)),
    ("Adam", dict(lr=1e-2, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
    ("RMSprop", dict(lr=1e-2, weight_decay=0.01)),
    ("RMSprop", dict(lr=1e-3, momentum=0.9, centered=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.01, initial_accumulator_value=0.1)),
    ("Adadelta", dict(lr=0.5, weight_decay=0.01)),
    ("Adamax", dict(lr=1e-2, weight_decay=0.02)),
    ("NAdam", dict(lr=1e-2, decoupled_weight_decay=True, weight_decay=0.05)),
    ("RAdam", dict(lr=1e-2, weight_decay=0.05)),
]
IDS = [name + "-" + ",".join(f"{k}={v}" for k, v in kw.items()) for name, kw in OPTIMIZERS]


def make_model():
    flow.manual_seed(0)
    return flow.nn.Sequential(flow.nn.Linear(5, 8), flow.nn.Tanh(), flow.nn.Linear(8, 3))


def batches(n: int = STEPS):
    rng = np.random.default_rng(1)
    return [(flow.tensor(rng.standard_normal((6, 5)).astype(np.float32)),
             flow.tensor(rng.standard_normal((6, 3)).astype(np.float32))) for _ in range(n)]


class TrainGraph(flow.nn.Graph):
    def __init__(self, model, optimizer, scheduler=None):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer, lr_sch=scheduler)

    def build(self, x, y):
        loss = flow.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        return loss


def make_scheduler(opt):
    sched = flow.optim.lr_scheduler
    return sched.SequentialLR(opt, [sched.LinearLR(opt, start_factor=0.2, total_iters=2),
                                    sched.CosineAnnealingLR(opt, T_max=4, eta_min=1e-3)], milestones=[2])


def close(actual, expected, what):
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max(), err_msg=what)


@pytest.mark.parametrize("with_scheduler", [False, True], ids=["constant-lr", "scheduler"])
@pytest.mark.parametrize("name,options", OPTIMIZERS, ids=IDS)
def test_graph_training_equals_eager(name, options, with_scheduler):
    eager, lazy = make_model(), make_model()
    eager_opt = getattr(flow.optim, name)(eager.parameters(), **options)
    graph_opt = getattr(flow.optim, name)(lazy.parameters(), **options)
    eager_sched = make_scheduler(eager_opt) if with_scheduler else None
    graph = TrainGraph(lazy, graph_opt, make_scheduler(graph_opt) if with_scheduler else None)
    graph_params = list(lazy.parameters())
    for i, (x, y) in enumerate(batches()):
        eager_opt.zero_grad()
        loss = flow.nn.functional.mse_loss(eager(x), y)
        loss.backward()
        eager_opt.step()
        if eager_sched is not None:
            eager_sched.step()
        graph_loss = graph(x, y)
        close(graph_loss.numpy(), loss.numpy(), f"loss at step {i}")
        for (pname, p), q, same in zip(eager.named_parameters(), lazy.parameters(), graph_params):
            assert q is same  # the eager module's Parameter objects hold the graph's values
            close(q.numpy(), p.numpy(), f"{pname} after step {i}")
    assert graph_opt.param_groups[0]["lr"] == pytest.approx(eager_opt.param_groups[0]["lr"])
    for p, q in zip(eager.parameters(), lazy.parameters()):  # optimizer state is written back too
        for key, value in eager_opt.state[p].items():
            close(graph_opt.state[q][key].numpy(), value.numpy(), f"state {key}")


def test_graph_names_optimizer_state_as_oneflow():
    model = make_model()
    opt = flow.optim.Adam(model.parameters(), lr=1e-2)
    graph = TrainGraph(model, opt)
    x, y = batches(1)[0]
    graph(x, y)
    state = graph._last.traced.state
    assert {"0.weight-m", "0.weight-v", "0.weight-step", "2.bias-m"} <= {
        k.split(".", 1)[1] for k in state if "." in k}
    assert opt.state[model[0].weight]["step"].item() == 1.0
