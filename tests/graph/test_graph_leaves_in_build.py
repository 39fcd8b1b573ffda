"""Tensors made inside ``build()`` to require grad (``flow.tensor(..., requires_grad=True)``,
``flow.zeros/ones/full/randn/rand(..., requires_grad=True)``, ``nn.Parameter(...)``,
``t.requires_grad_()``) are, as eagerly, a new leaf on every call whose gradient
``backward()`` computes for that call; random ones draw afresh on every call, and so do the
initialisers of a module made in ``build()``."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import GraphError


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def _x():
    return flow.tensor(np.random.default_rng(1).standard_normal((3, 2)).astype(np.float32))


def _net():
    flow.manual_seed(0)
    return nn.Linear(2, 3)  # its weight is (3, 2), like x


FIXED = {
    "tensor_of_numbers": lambda net, x: flow.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True),
    "full": lambda net, x: flow.full((3, 2), 0.5, requires_grad=True),
    "ones_batch_sized": lambda net, x: flow.ones(x.shape[0], 2, requires_grad=True),
    "ones_like": lambda net, x: flow.ones_like(x, requires_grad=True),
    "eye": lambda net, x: flow.eye(3, 2, requires_grad=True),
    "tensor_of_parameter": lambda net, x: flow.tensor(net.weight, requires_grad=True),
    "parameter": lambda net, x: nn.Parameter(flow.full((3, 2), 2.0)),
    "parameter_of_parameter": lambda net, x: nn.Parameter(net.weight.detach()),
    "requires_grad_": lambda net, x: flow.ones(3, 2).requires_grad_(),
}

RANDOM = {
    "randn": lambda net, x: flow.randn(3, 2, requires_grad=True),
    "rand": lambda net, x: flow.rand(3, 2, requires_grad=True),
    "randn_like": lambda net, x: flow.randn_like(x, requires_grad=True),
}


def _step(net, x, make):
    """The body of a step: the net's loss plus a term in a leaf made here; the leaf, its
    gradient (2 x^2 w) and the loss come out."""
    w = make(net, x)
    loss = (net(x) ** 2).mean() + ((x * w) ** 2).sum()
    loss.backward()
    return loss, w, w.grad


class _Graph(nn.Graph):
    def __init__(self, net, opt, make):
        super().__init__()
        self.net, self.make = net, make
        self.add_optimizer(opt)

    def build(self, x):
        return _step(self.net, x, self.make)


def _graph(make):
    net = _net()
    return _Graph(net, flow.optim.SGD(net.parameters(), lr=0.1), make), net


@pytest.mark.parametrize("name", sorted(FIXED))
def test_a_leaf_made_in_build_gets_each_calls_gradient_as_eagerly(name):
    make = FIXED[name]
    eager_net = _net()
    opt = flow.optim.SGD(eager_net.parameters(), lr=0.1)
    graph, net = _graph(make)
    x = _x()
    for _ in range(3):
        opt.zero_grad()
        want = [t.numpy().copy() for t in _step(eager_net, x, make)]
        opt.step()
        got = graph(x)
        for g, w in zip(got, want):
            _close(g.numpy(), w)
    _close(net.weight.numpy(), eager_net.weight.numpy())


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_a_random_leaf_made_in_build_is_drawn_afresh_and_gets_its_gradient(name):
    graph, _ = _graph(RANDOM[name])
    x = _x()
    draws = []
    for _ in range(3):
        _, w, grad = graph(x)
        _close(grad.numpy(), 2 * x.numpy() ** 2 * w.numpy())
        draws.append(w.numpy().copy())
    assert not np.allclose(draws[0], draws[1]) and not np.allclose(draws[1], draws[2])


def test_autograd_grad_of_a_leaf_made_in_build():
    class Grad(_Graph):
        def build(self, x):
            w = flow.randn(3, 2, requires_grad=True)
            (grad,) = flow.autograd.grad(((x * w) ** 2).sum(), [w])
            loss = (self.net(x) ** 2).mean()
            loss.backward()
            return w, grad

    net = _net()
    graph = Grad(net, flow.optim.SGD(net.parameters(), lr=0.1), None)
    x = _x()
    for _ in range(2):
        w, grad = graph(x)
        _close(grad.numpy(), 2 * x.numpy() ** 2 * w.numpy())


class _MadeInBuild(_Graph):
    def build(self, x):
        extra = nn.Linear(2, 3)  # initialised (kaiming_uniform_, uniform_) on every call, as eagerly
        loss = (self.net(x) ** 2).mean() + extra(x).sum()
        loss.backward()
        return extra.weight, extra.weight.grad


def test_a_module_made_in_build_is_initialised_afresh_on_every_call():
    net = _net()
    graph = _MadeInBuild(net, flow.optim.SGD(net.parameters(), lr=0.1), None)
    x = _x()
    weights = []
    with pytest.warns(UserWarning):  # a module the graph does not hold
        first = graph(x)
    for weight, grad in [first, graph(x), graph(x)]:
        _close(grad.numpy(), np.broadcast_to(x.numpy().sum(0), (3, 2)))
        assert np.abs(weight.numpy()).max() <= 1 / np.sqrt(2)  # kaiming_uniform_'s bound for fan_in 2
        weights.append(weight.numpy().copy())
    assert not np.allclose(weights[0], weights[1]) and not np.allclose(weights[1], weights[2])


@pytest.mark.parametrize("init", ["trunc_normal_", "orthogonal_"])
def test_an_initialiser_that_would_draw_once_is_an_error_in_build(init):
    class Init(_Graph):
        def build(self, x):
            w = nn.Parameter(flow.empty(3, 2))
            getattr(nn.init, init)(w)
            loss = (self.net(x) ** 2).mean() + (x * w).sum()
            loss.backward()
            return loss

    net = _net()
    with pytest.raises(GraphError, match=rf"nn.init.{init} inside nn.Graph.build would draw once"):
        Init(net, flow.optim.SGD(net.parameters(), lr=0.1), None)(_x())
