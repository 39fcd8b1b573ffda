"""Reads of an optimizer inside a training graph's ``build()`` follow the optimizer as eager
mode does: its per-parameter state (SGD's momentum buffer, Adam's ``exp_avg`` and step
count) is the state before each call's update, and ``param_groups[i]["lr"]`` the learning
rate of each call (changed by a scheduler or by hand between calls)."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def _net():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))


def _x():
    return flow.tensor(np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32))


def _loss(net, x):
    return (net(x) ** 2).mean()


OPTIMIZERS = {
    "sgd_momentum": (lambda ps: flow.optim.SGD(ps, lr=0.1, momentum=0.9), ["momentum_buffer"]),
    "adam": (lambda ps: flow.optim.Adam(ps, lr=0.05), ["exp_avg", "exp_avg_sq", "step"]),
}


def _read_state(opt, net, keys):
    """The state of the first layer's weight, as a flat vector."""
    state = opt.state[net[0].weight]
    return flow.cat([state[k].detach().reshape(-1) for k in keys])


class _StateGraph(nn.Graph):
    def __init__(self, net, opt, keys):
        super().__init__()
        self.net, self.keys = net, keys
        self.opts = [opt]  # nn.Graph holds optimizers through add_optimizer only
        self.add_optimizer(opt)

    def build(self, x):
        loss = _loss(self.net, x)
        loss.backward()
        return loss, _read_state(self.opts[0], self.net, self.keys)


def _eager_step(net, opt, x):
    opt.zero_grad()
    _loss(net, x).backward()
    opt.step()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_state_read_in_build_follows_each_step(name):
    make, keys = OPTIMIZERS[name]
    eager_net, graph_net = _net(), _net()
    eager_opt, graph_opt = make(eager_net.parameters()), make(graph_net.parameters())
    x = _x()
    _eager_step(eager_net, eager_opt, x)  # both optimizers hold state before the graph is traced
    _eager_step(graph_net, graph_opt, x)
    graph = _StateGraph(graph_net, graph_opt, keys)
    for _ in range(3):
        eager_opt.zero_grad()
        loss = _loss(eager_net, x)
        loss.backward()
        want = _read_state(eager_opt, eager_net, keys).numpy().copy()
        eager_opt.step()
        got_loss, got = graph(x)
        _close(got_loss.numpy(), loss.numpy())
        _close(got.numpy(), want)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_state_of_a_fresh_optimizer_reads_as_its_initial_value_then_follows(name):
    """Traced before any update, build() reads the state the first update starts from
    (zeros), then each later call's state."""
    make, keys = OPTIMIZERS[name]
    eager_net, graph_net = _net(), _net()
    eager_opt, graph_opt = make(eager_net.parameters()), make(graph_net.parameters())
    graph = _StateGraph(graph_net, graph_opt, keys)
    x = _x()
    _, first = graph(x)
    _close(first.numpy(), np.zeros(first.shape, np.float32))
    _eager_step(eager_net, eager_opt, x)
    for _ in range(2):
        want = _read_state(eager_opt, eager_net, keys).numpy().copy()
        _, got = graph(x)
        _close(got.numpy(), want)
        _eager_step(eager_net, eager_opt, x)
    _close(graph_net[0].weight.numpy(), eager_net[0].weight.numpy())


def test_state_made_for_the_trace_is_kept_only_for_parameters_the_graph_updates():
    net = _net()
    frozen = nn.Linear(2, 2)  # held by the graph and its optimizer, never given a gradient
    opt = flow.optim.SGD(list(net.parameters()) + list(frozen.parameters()), lr=0.1, momentum=0.9)

    class Graph(_StateGraph):
        def __init__(self):
            super().__init__(net, opt, ["momentum_buffer"])
            self.frozen = frozen

    Graph()(_x())
    assert set(opt.state) == set(net.parameters())


@pytest.mark.parametrize("used_in_build", [True, False])
def test_an_optimizer_tensor_no_module_holds_is_refused_not_left_unchanged(used_in_build):
    """Eagerly ``opt.step()`` updates a free tensor; a graph would read it as a constant."""
    net = _net()
    free = flow.ones(4, requires_grad=True)
    opt = flow.optim.SGD([free] + list(net.parameters()), lr=0.1)

    class Graph(_StateGraph):
        def build(self, x):
            loss = _loss(self.net, x * free if used_in_build else x)
            loss.backward()
            return loss

    with pytest.raises(flow.errors.GraphError, match=r"updates a tensor of size \(4,\) \(param_groups\[0\]\) "
                                                     r"that no module of the graph holds"):
        Graph(net, opt, [])(_x())
    np.testing.assert_array_equal(free.numpy(), np.ones(4, np.float32))


class _LrGraph(nn.Graph):
    def __init__(self, net, opt, scheduler=None):
        super().__init__()
        self.net = net
        self.opts = [opt]
        self.add_optimizer(opt, lr_sch=scheduler)

    def build(self, x):
        loss = _loss(self.net, x)
        loss.backward()
        return loss * self.opts[0].param_groups[0]["lr"]


def test_learning_rate_read_in_build_follows_the_scheduler():
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.5)
    graph = _LrGraph(net, opt, flow.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5))
    x = _x()
    for _ in range(3):
        lr = opt.param_groups[0]["lr"]
        with flow.no_grad():
            want = _loss(net, x).numpy() * lr
        _close(graph(x).numpy(), want)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5 * 0.5**3)


def test_learning_rate_set_by_hand_between_calls_is_read_and_stays_a_float():
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1)
    graph = _LrGraph(net, opt)
    x = _x()
    graph(x)
    assert isinstance(opt.param_groups[0]["lr"], float)
    opt.param_groups[0]["lr"] = 0.02
    with flow.no_grad():
        want = _loss(net, x).numpy() * 0.02
    _close(graph(x).numpy(), want)


def test_assigning_a_traced_learning_rate_inside_build_is_an_error():
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1)

    class Halves(_LrGraph):
        def build(self, x):
            loss = _loss(self.net, x)
            loss.backward()
            self.opts[0].param_groups[0]["lr"] = self.opts[0].param_groups[0]["lr"] * 0.5
            return loss

    with pytest.raises(flow.errors.GraphError, match="learning rate"):
        Halves(net, opt)(_x())
    assert opt.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("key, value", [("momentum", 0.5), ("weight_decay", 0.01), ("nesterov", True)])
def test_a_group_option_changed_after_the_trace_is_an_error_not_the_traced_value(key, value):
    """The update compiled into the graph holds momentum, weight decay, ... as traced: a call
    after a change says so rather than training with the old value."""
    net = _net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    graph = _LrGraph(net, opt)
    x = _x()
    graph(x)
    opt.param_groups[0][key] = value
    before = net[0].weight.numpy().copy()
    with pytest.raises(flow.errors.GraphError, match=rf"param_groups\[0\]\['{key}'\] = .*build a new nn.Graph"):
        graph(x)
    _close(net[0].weight.numpy(), before)  # no step ran
    _LrGraph(net, opt)(x)  # a new graph traces the new value
