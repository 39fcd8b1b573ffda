"""Reads of a learning-rate scheduler inside a training graph's ``build()`` follow the
scheduler as eager mode does: ``get_last_lr()``, ``last_epoch`` and its other numbers are
each call's values, whether the graph steps the scheduler (``add_optimizer(opt, lr_sch=...)``)
or the user steps it between calls; reads the graph cannot follow are errors at trace time."""

from __future__ import annotations

import copy

import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import GraphError
from tests.graph.test_graph_optimizer_reads import _close, _net, _x

lr_scheduler = flow.optim.lr_scheduler


def _warm_restarts_read(sched):
    return sched.T_cur * 0.05


SCHEDULERS = {
    "step": (lambda opt: lr_scheduler.StepLR(opt, step_size=2, gamma=0.5), lambda s: s.base_lrs[0] * s.gamma),
    "warmup_lambda": (lambda opt: lr_scheduler.LambdaLR(opt, lambda e: min(1.0, (e + 1) / 3)), None),
    "cosine": (lambda opt: lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.01), None),
    "warmup_then_cosine": (lambda opt: lr_scheduler.SequentialLR(
        opt, [lr_scheduler.LinearLR(opt, start_factor=0.2, total_iters=2),
              lr_scheduler.CosineAnnealingLR(opt, T_max=3)], milestones=[2]), None),
    "warm_restarts": (lambda opt: lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2),
                      _warm_restarts_read),
}


def _loss(net, x, sched, extra=None):
    """The loss scaled by what the scheduler says for this step: build() and eager alike."""
    scale = sched.get_last_lr()[0] * 10 + sched.last_epoch * 0.1
    if extra is not None:
        scale = scale + extra(sched)
    return (net(x) ** 2).mean() * scale


class _Graph(nn.Graph):
    def __init__(self, net, opt, sched, attach, extra=None):
        super().__init__()
        self.net, self.sched, self.extra = net, sched, extra
        self.add_optimizer(opt, lr_sch=sched if attach else None)

    def build(self, x):
        loss = _loss(self.net, x, self.sched, self.extra)
        loss.backward()
        return loss


def _eager_steps(name: str, steps: int):
    make, extra = SCHEDULERS[name]
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = make(opt)
    x, losses = _x(), []
    for _ in range(steps):
        opt.zero_grad()
        loss = _loss(net, x, sched, extra)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.numpy().copy())
    return net, sched, losses


def _graph_steps(graph, sched, attach: bool, steps: int) -> list:
    x, losses = _x(), []
    for _ in range(steps):
        losses.append(graph(x).numpy().copy())
        if not attach:
            sched.step()
    return losses


@pytest.mark.parametrize("attach", [True, False], ids=["lr_sch", "stepped_by_user"])
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_read_in_build_follows_each_step(name, attach):
    make, extra = SCHEDULERS[name]
    eager_net, eager_sched, want = _eager_steps(name, 6)
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = make(opt)
    got = _graph_steps(_Graph(net, opt, sched, attach, extra), sched, attach, 6)
    assert len({float(v) for v in want}) == 6  # the schedule changes the loss at every step
    _close(got, want)
    for p, q in zip(net.parameters(), eager_net.parameters()):
        _close(p.numpy(), q.numpy())
    assert sched.get_last_lr() == pytest.approx(eager_sched.get_last_lr())
    assert isinstance(sched.last_epoch, int) and sched.last_epoch == eager_sched.last_epoch


@pytest.mark.parametrize("name", ["step", "warmup_lambda", "cosine"])
def test_saved_and_loaded_graph_continues_to_follow_the_scheduler(tmp_path, name):
    make, extra = SCHEDULERS[name]
    _, _, want = _eager_steps(name, 5)
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = make(opt)
    first = _Graph(net, opt, sched, attach=True, extra=extra)
    got = _graph_steps(first, sched, True, 2)
    flow.save(first.state_dict(), tmp_path / "graph")
    flow.save(opt.state_dict(), tmp_path / "optimizer")
    flow.save(sched.state_dict(), tmp_path / "scheduler")

    net = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    opt = flow.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = make(opt)
    opt.load_state_dict(flow.load(tmp_path / "optimizer"))
    sched.load_state_dict(flow.load(tmp_path / "scheduler"))
    resumed = _Graph(net, opt, sched, attach=True, extra=extra)
    resumed.load_state_dict(flow.load(tmp_path / "graph"))
    got += _graph_steps(resumed, sched, True, 3)
    _close(got, want)


def test_a_copy_of_the_optimizer_and_scheduler_is_followed_like_the_original():
    _, _, want = _eager_steps("step", 4)
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net, opt, sched = copy.deepcopy((net, opt, SCHEDULERS["step"][0](opt)))
    got = _graph_steps(_Graph(net, opt, sched, attach=False, extra=SCHEDULERS["step"][1]), sched, False, 4)
    _close(got, want)


def test_only_the_scheduler_numbers_build_reads_are_fed():
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    class Reads(nn.Graph):
        def __init__(self):
            super().__init__()
            self.net = net
            self.add_optimizer(opt, lr_sch=sched)

        def build(self, x):
            loss = (self.net(x) ** 2).mean() * sched.get_last_lr()[0]
            loss.backward()
            return loss

    graph = Reads()
    graph(_x())
    fed = [name for name in graph.parts.last.traced.ir.state if "Scheduler" in name]
    assert fed == ["System-Optimizer-0-Scheduler-0-_last_lr-0"]


def _reading_graph(net, opt, read, attach=None):
    class Reads(nn.Graph):
        def __init__(self):
            super().__init__()
            self.net = net
            if opt is not None:
                self.add_optimizer(opt, lr_sch=attach)

        def build(self, x):
            out = (self.net(x) ** 2).mean()
            if opt is not None:
                out.backward()
            return out * read()

    return Reads()


def test_reading_a_scheduler_of_an_optimizer_the_graph_does_not_hold_is_an_error():
    net, other = _net(), nn.Linear(2, 2)
    opt = flow.optim.SGD(net.parameters(), lr=0.1)
    elsewhere = lr_scheduler.StepLR(flow.optim.SGD(other.parameters(), lr=0.1), step_size=1)
    graph = _reading_graph(net, opt, lambda: elsewhere.get_last_lr()[0])
    with pytest.raises(GraphError, match=r"StepLR.get_last_lr\(\) of a scheduler whose optimizer the graph does "
                                         r"not hold.*add_optimizer"):
        graph(_x())
    inference = _reading_graph(net, None, lambda: elsewhere.last_epoch)
    with pytest.raises(GraphError, match="StepLR.last_epoch of a scheduler whose optimizer"):
        inference(_x())
    assert elsewhere.last_epoch == 0 and elsewhere.get_last_lr() == [0.1]


def test_stepping_or_changing_a_scheduler_inside_build_is_an_error():
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    with pytest.raises(GraphError, match=r"StepLR.step\(\) inside nn.Graph.build.*after each call"):
        _reading_graph(net, opt, lambda: sched.step() or 1.0)(_x())

    def assign():
        sched.last_epoch = sched.last_epoch + 1
        return 1.0

    with pytest.raises(GraphError, match=r"nn.Graph.build changed StepLR.last_epoch"):
        _reading_graph(net, opt, assign)(_x())
    assert sched.last_epoch == 0 and sched.get_last_lr() == [0.1] and opt.param_groups[0]["lr"] == 0.1


def test_python_control_flow_on_a_scheduler_read_is_an_error_not_the_traced_branch():
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    with pytest.raises(GraphError, match=r"lazy tensor inside nn.Graph.build.*flow.where for a branch"):
        _reading_graph(net, opt, lambda: 2.0 if sched.last_epoch < 3 else 1.0, attach=sched)(_x())
    with pytest.raises(GraphError, match=r"Tensor.item\(\) needs a value.*the per-call value "
                                         r"'System-Optimizer-0-Scheduler-0-last_epoch'"):
        _reading_graph(net, opt, lambda: float(int(sched.last_epoch)), attach=sched)(_x())


def test_a_number_that_changes_kind_after_the_trace_is_an_error():
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    graph = _reading_graph(net, opt, lambda: sched.last_epoch * 0.5)
    graph(_x())
    sched.last_epoch = 2.5
    with pytest.raises(GraphError, match=r"StepLR.last_epoch was traced when it was an integer; it is now 2.5"):
        graph(_x())


def test_a_branch_on_the_schedule_written_with_where_follows_each_step():
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1)
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    graph = _reading_graph(net, opt, lambda: flow.where(sched.last_epoch < 2, flow.tensor(2.0), flow.tensor(1.0)),
                           attach=sched)
    x = _x()
    for step in range(4):
        with flow.no_grad():
            want = (net(x) ** 2).mean().numpy() * (2.0 if step < 2 else 1.0)
        _close(graph(x).numpy(), want)
