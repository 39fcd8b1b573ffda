"""Reads of a graph's state that carry no gradient (``detach()``, ``.data``, ``no_grad``
blocks, ``clone().detach()``, ``flow.tensor(p)``, ``flow.tensor([p, q])``) follow the state: a training graph sees each step's
parameters and buffers, an inference graph the values its module holds when it is called,
a saved graph the values at ``flow.save`` time, as eager mode does."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


class _Net(nn.Module):
    """A linear layer and a batch norm whose forward also reads a parameter and a buffer
    without their gradient."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        h = self.bn(self.lin(x))
        return h * self.lin.weight.detach().abs().mean() + self.bn.running_mean.data.sum()


def _no_grad_read(net):
    with flow.no_grad():
        return net.lin.weight * 1.0


READS = {
    "detach": lambda net: net.lin.weight.detach(),
    "data": lambda net: net.lin.weight.data,
    "no_grad": _no_grad_read,
    "clone_detach": lambda net: net.lin.weight.clone().detach(),
    "detach_clone": lambda net: net.lin.weight.detach().clone(),
    "bias_detach_op": lambda net: net.lin.bias.detach() * 2.0,
    "buffer_detach": lambda net: net.bn.running_mean.detach(),
    "buffer_data": lambda net: net.bn.running_var.data,
    "tensor_copy": lambda net: flow.tensor(net.lin.weight),
    "tensor_copy_float64": lambda net: flow.tensor(net.bn.running_mean, dtype=flow.float64),
    "tensor_of_list": lambda net: flow.tensor([net.lin.bias, net.bn.running_mean]),
    "tensor_of_nested_list": lambda net: flow.tensor(([net.lin.bias], [net.bn.running_var.data])),
    "tensor_of_elements_and_numbers": lambda net: flow.tensor([net.lin.weight[0, 1], net.bn.running_mean[2], 2.5]),
    "tensor_of_list_float64": lambda net: flow.tensor([net.lin.bias, net.lin.bias * 2.0], dtype=flow.float64),
}


def _net():
    flow.manual_seed(0)
    return _Net()


def _x(seed=1, n=6):
    return flow.tensor(np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32))


def _step(net, x, read):
    """One step's body: forward (the batch norm updates its running stats), backward, then
    the read, which sees the state as it is before the optimizer's update."""
    loss = (net(x) ** 2).sum()
    loss.backward()
    return loss, read(net)


class _TrainGraph(nn.Graph):
    def __init__(self, net, opt, read):
        super().__init__()
        self.net = net
        self.add_optimizer(opt)
        self.read = read

    def build(self, x):
        return _step(self.net, x, self.read)


class _InferGraph(nn.Graph):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def build(self, x):
        return self.net(x), self.net.lin.weight.detach().sum(), self.net.bn.running_mean.data


@pytest.mark.parametrize("kind", sorted(READS))
def test_training_graph_reads_each_steps_state_as_eager(kind):
    read = READS[kind]
    eager_net, graph_net = _net(), _net()
    eager_opt = flow.optim.SGD(eager_net.parameters(), lr=0.1, momentum=0.9)
    graph = _TrainGraph(graph_net, flow.optim.SGD(graph_net.parameters(), lr=0.1, momentum=0.9), read)
    x = _x()
    for step in range(3):
        eager_opt.zero_grad()
        loss, value = _step(eager_net, x, read)
        expected = value.numpy().copy()
        eager_opt.step()
        got_loss, got = graph(x)
        _close(got_loss.numpy(), loss.numpy())
        _close(got.numpy(), expected)
    _close(graph_net.lin.weight.numpy(), eager_net.lin.weight.numpy())
    _close(graph_net.bn.running_mean.numpy(), eager_net.bn.running_mean.numpy())


def test_a_detached_parameter_changes_with_each_training_step():
    net = _net()
    graph = _TrainGraph(net, flow.optim.SGD(net.parameters(), lr=0.5), READS["detach"])
    x = _x()
    seen = []
    for _ in range(3):
        before = net.lin.weight.numpy().copy()
        _, got = graph(x)
        _close(got.numpy(), before)
        seen.append(got.numpy().copy())
    assert not np.allclose(seen[0], seen[1]) and not np.allclose(seen[1], seen[2])


def test_a_training_graph_goes_on_from_state_replaced_between_steps():
    """A parameter and a buffer given new arrays eagerly (``.data =``) between steps: the
    graph's next steps start from them, as eager training does, and its buffers follow."""
    nets = _net(), _net()
    eager_opt = flow.optim.SGD(nets[0].parameters(), lr=0.1, momentum=0.9)
    graph = _TrainGraph(nets[1], flow.optim.SGD(nets[1].parameters(), lr=0.1, momentum=0.9), READS["detach"])
    x = _x()
    for step in range(5):
        if step == 2:
            rng = np.random.default_rng(7)
            weight = rng.standard_normal(tuple(nets[0].lin.weight.shape)).astype(np.float32)
            mean = rng.standard_normal(tuple(nets[0].bn.running_mean.shape)).astype(np.float32)
            for net in nets:
                net.lin.weight.data = flow.tensor(weight)
                net.bn.running_mean.data = flow.tensor(mean)
        eager_opt.zero_grad()
        loss, _ = _step(nets[0], x, READS["detach"])
        eager_opt.step()
        got, _ = graph(x)
        _close(got.numpy(), loss.numpy())
    _close(nets[1].lin.weight.numpy(), nets[0].lin.weight.numpy())
    _close(nets[1].bn.running_mean.numpy(), nets[0].bn.running_mean.numpy())


def _eager_infer(net, x):
    with flow.no_grad():
        return net(x).numpy(), net.lin.weight.sum().numpy(), net.bn.running_mean.numpy().copy()


def _check_infer(graph, net, x):
    for got, want in zip(graph(x), _eager_infer(net, x)):
        _close(got.numpy(), want)


def test_inference_graph_sees_parameters_changed_between_calls():
    net = _net()
    x = _x()
    opt = flow.optim.SGD(net.parameters(), lr=0.2)
    net.train()
    for _ in range(2):  # running stats away from their initial values
        opt.zero_grad()
        (net(x) ** 2).sum().backward()
        opt.step()
    net.eval()
    graph = _InferGraph(net)
    _check_infer(graph, net, x)
    opt.zero_grad()
    net.train()
    (net(_x(2)) ** 2).sum().backward()
    opt.step()  # an eager optimizer step: new weights and running stats
    net.eval()
    _check_infer(graph, net, x)
    with flow.no_grad():
        net.lin.weight.copy_(net.lin.weight * -3.0)
        net.bn.running_mean.copy_(net.bn.running_mean + 1.0)
    _check_infer(graph, net, x)


def test_saved_inference_graph_holds_the_state_at_save_time(tmp_path):
    net = _net()
    net.eval()
    x = _x()
    graph = _InferGraph(net)
    graph(x)
    with flow.no_grad():
        net.lin.weight.copy_(net.lin.weight * 2.0 + 0.5)
        net.bn.running_var.copy_(net.bn.running_var + 3.0)
    flow.save(graph, tmp_path / "g")
    want = _eager_infer(net, x)
    with flow.no_grad():
        net.lin.weight.copy_(net.lin.weight * 0.0)  # the saved graph keeps its own copy
    for got, ref in zip(flow.load(tmp_path / "g")(x), want):
        _close(np.asarray(got), ref)


def test_saved_training_graph_deploys_the_trained_state(tmp_path):
    net = _net()
    graph = _TrainGraph(net, flow.optim.SGD(net.parameters(), lr=0.1), READS["detach"])
    x = _x()
    for _ in range(3):
        graph(x)
    flow.save(graph, tmp_path / "g", model=graph.net)
    net.eval()
    with flow.no_grad():
        want = net(x).numpy()
    _close(np.asarray(flow.load(tmp_path / "g")(x)), want)


def _clip_step(net, x, read):
    """A step that clips the weight through ``.data`` (WGAN style) after backward."""
    loss, value = _step(net, x, read)
    net.lin.weight.data = net.lin.weight.data.clamp(-0.2, 0.2)
    return loss, value, net.lin.weight.detach().abs().max()


class _ClipGraph(_TrainGraph):
    def build(self, x):
        return _clip_step(self.net, x, self.read)


def test_assigning_data_inside_build_updates_the_state_as_eager():
    eager_net, graph_net = _net(), _net()
    eager_opt = flow.optim.SGD(eager_net.parameters(), lr=0.3)
    graph = _ClipGraph(graph_net, flow.optim.SGD(graph_net.parameters(), lr=0.3), READS["data"])
    x = _x()
    for _ in range(3):
        eager_opt.zero_grad()
        expected = [t.numpy().copy() for t in _clip_step(eager_net, x, READS["data"])]
        eager_opt.step()
        for got, want in zip(graph(x), expected):
            _close(got.numpy(), want)
        _close(graph_net.lin.weight.numpy(), eager_net.lin.weight.numpy())


def test_assigning_a_traced_value_to_a_tensor_that_is_not_state_is_an_error():
    held = flow.zeros(2)

    class Holds(nn.Graph):
        def build(self, x):
            held.data = x * 2.0
            return x

    with pytest.raises(flow.errors.GraphError, match="not graph state"):
        Holds()(flow.ones(2))
    _close(held.numpy(), np.zeros(2))  # still an eager tensor with its own value


def test_numpy_of_graph_state_inside_build_warns_that_the_graph_keeps_its_value():
    net = _net()

    class ReadsNumpy(nn.Graph):
        def __init__(self):
            super().__init__()
            self.net = net

        def build(self, x):
            return x * float(self.net.lin.weight.numpy().sum())

    with pytest.warns(UserWarning, match="graph keeps that value on every call"):
        ReadsNumpy()(flow.ones(2))
