"""A training nn.Graph writes only into memory it allocated itself, as eager steps do.

``flow.from_numpy(a)`` shares ``a``; a Parameter or buffer made from it, or given such an
array between steps (``p.data = ...``, ``copy_``), is trained by the graph while ``a``
keeps its values, exactly as eager steps leave it; arrays and views taken from a trained
parameter keep the values they had (eager updates rebind, never write into them). The
graph's parameters equal eager's after every call, also once saved and loaded back.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from tests.graph.helpers import assert_close, assert_same_params

MAKERS = {"from_numpy": flow.from_numpy, "Tensor": flow.Tensor}
OPTIMIZERS = {
    "sgd_momentum": lambda params, **kw: flow.optim.SGD(params, lr=0.1, momentum=0.9, **kw),
    "adam": lambda params, **kw: flow.optim.Adam(params, lr=0.05, **kw),
}


def _arrays() -> list:
    rng = np.random.default_rng(3)
    return [rng.standard_normal(shape).astype(np.float32) for shape in ((5, 4), (5,), (3, 5), (3,))]


def _model(make, arrays) -> nn.Module:
    """Linear-Tanh-BatchNorm-Linear whose parameters (and the running mean) are ``make(array)``."""
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.BatchNorm1d(5), nn.Linear(5, 3))
    for layer, (w, b) in zip((model[0], model[3]), (arrays[:2], arrays[2:])):
        layer.weight, layer.bias = nn.Parameter(make(w)), nn.Parameter(make(b))
    model[2].running_mean = make(np.zeros(5, np.float32))
    return model


def _data():
    rng = np.random.default_rng(4)
    return (flow.tensor(rng.standard_normal((8, 4)).astype(np.float32)),
            flow.tensor(rng.standard_normal((8, 3)).astype(np.float32)))


class _Train(nn.Graph):
    def __init__(self, model, opt):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)

    def build(self, x, target):
        loss = ((self.model(x) - target) ** 2).mean()
        loss.backward()
        return loss


def _eager_step(model, opt, x, target):
    opt.zero_grad()
    loss = ((model(x) - target) ** 2).mean()
    loss.backward()
    opt.step()
    return loss


class _Pair:
    """The same model trained in a graph and eagerly, each over arrays of its own."""

    def __init__(self, make, opt, **opt_kw):
        self.make = make
        self.graph_arrays, self.eager_arrays = _arrays(), _arrays()
        self.graph_model, self.eager_model = _model(make, self.graph_arrays), _model(make, self.eager_arrays)
        self.graph = _Train(self.graph_model, OPTIMIZERS[opt](self.graph_model.parameters(), **opt_kw))
        self.eager_opt = OPTIMIZERS[opt](self.eager_model.parameters(), **opt_kw)
        self.x, self.target = _data()

    def step(self, call: int):
        got = self.graph(self.x, self.target)
        want = _eager_step(self.eager_model, self.eager_opt, self.x, self.target)
        assert_close(got.numpy(), want.numpy(), what=f"loss at call {call}")
        assert_same_params(self.graph_model, self.eager_model)
        assert_close(self.graph_model[2].running_mean.numpy(), self.eager_model[2].running_mean.numpy(),
                     what=f"running mean at call {call}")


def _assert_kept(arrays, eager_arrays, originals, call: int) -> None:
    for i, (mine, eager, original) in enumerate(zip(arrays, eager_arrays, originals)):
        np.testing.assert_array_equal(eager, original, err_msg=f"eager changed array {i} by call {call}")
        np.testing.assert_array_equal(mine, eager, err_msg=f"graph changed array {i} by call {call}")


@pytest.mark.parametrize("opt", list(OPTIMIZERS))
@pytest.mark.parametrize("make", list(MAKERS))
def test_training_leaves_the_users_arrays_as_eager_does(make, opt):
    pair = _Pair(MAKERS[make], opt)
    originals = _arrays()
    for call in range(1, 5):
        pair.step(call)
        _assert_kept(pair.graph_arrays, pair.eager_arrays, originals, call)


def test_buffer_made_from_an_array_is_left_as_eager_leaves_it():
    pair = _Pair(flow.from_numpy, "sgd_momentum")
    mine, eager = np.zeros(5, np.float32), np.zeros(5, np.float32)
    pair.graph_model[2].running_mean, pair.eager_model[2].running_mean = flow.from_numpy(mine), flow.from_numpy(eager)
    for call in range(1, 5):
        pair.step(call)
        _assert_kept([mine], [eager], [np.zeros(5, np.float32)], call)


@pytest.mark.parametrize("opt", list(OPTIMIZERS))
def test_state_given_new_arrays_between_steps_leaves_them_alone(opt):
    pair = _Pair(flow.from_numpy, opt)
    given = {side: [np.full((5, 4), 0.5, np.float32), np.full(5, -0.25, np.float32),
                    np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)] for side in ("graph", "eager")}
    originals = [a.copy() for a in given["graph"]]
    pair.step(1)
    for side, model in (("graph", pair.graph_model), ("eager", pair.eager_model)):
        model[0].weight.data = flow.from_numpy(given[side][0])
        model[2].running_mean = flow.from_numpy(given[side][1])
    pair.step(2)
    other = {side: flow.tensor(given[side][2]) for side in given}  # a tensor of the user's, copied in
    for side, model in (("graph", pair.graph_model), ("eager", pair.eager_model)):
        with flow.no_grad():
            model[3].weight.copy_(other[side])
    for call in range(3, 7):
        pair.step(call)
        _assert_kept(given["graph"], given["eager"], originals, call)
        np.testing.assert_array_equal(other["graph"].numpy(), other["eager"].numpy())
        np.testing.assert_array_equal(other["graph"].numpy(), originals[2])


def _taken(p) -> dict:
    return {"numpy": p.numpy(), "reshape": p.reshape(-1), "row": p[0], "t": p.t(), "detach": p.detach()}


def test_arrays_and_views_of_a_trained_parameter_keep_their_values():
    """As eager steps that rebind (``foreach=False``): ``.numpy()`` and views keep the
    value they were taken at, ``detach()`` follows the parameter; once nothing holds a
    buffer any more, the graph goes back to writing into the same two."""
    pair = _Pair(flow.from_numpy, "sgd_momentum", foreach=False)
    pair.step(1)
    mine, eager = _taken(pair.graph_model[0].weight), _taken(pair.eager_model[0].weight)
    at_first = {k: np.array(v).copy() for k, v in mine.items()}
    for call in range(2, 6):
        pair.step(call)
        for key in mine:
            assert_close(np.asarray(mine[key]), np.asarray(eager[key]), what=f"{key}, call {call}")
            if key != "detach":
                np.testing.assert_array_equal(np.asarray(mine[key]), at_first[key], err_msg=f"{key}, call {call}")
    assert_close(mine["detach"].numpy(), pair.graph_model[0].weight.numpy())
    del mine
    weights = [p for p in pair.graph_model.parameters()]
    seen = []
    for call in range(6, 10):
        pair.step(call)
        seen.append([weakref.ref(p._data) for p in weights])
    for later, earlier in ((2, 0), (3, 1)):  # call 8 wrote into call 6's buffers, call 9 into call 7's
        assert all(a() is not None and a() is b() for a, b in zip(seen[later], seen[earlier]))


@pytest.mark.parametrize("opt", list(OPTIMIZERS))
def test_saved_and_loaded_graph_gives_eagers_numbers_after_each_call(tmp_path, opt):
    pair = _Pair(flow.from_numpy, opt)
    originals = _arrays()
    for call in range(1, 5):
        pair.step(call)
        flow.save(pair.graph, tmp_path / f"g{call}")
        loaded = flow.load(tmp_path / f"g{call}")
        pair.eager_model.eval()
        with flow.no_grad():
            want = pair.eager_model(pair.x).numpy()
        pair.eager_model.train()
        assert_close(loaded(pair.x).numpy(), want, what=f"loaded graph after call {call}")
        assert_close(loaded(pair.x.numpy()).numpy(), want)
        _assert_kept(pair.graph_arrays, pair.eager_arrays, originals, call)
