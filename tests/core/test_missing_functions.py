"""The functions ported code reached for and flowserve lacked (issue 26 item 3): ``divide``,
``diff``, ``meshgrid``, ``empty(size=...)``, ``nn.Dropout2d`` on 2-D/3-D input and
``optim.LBFGS``, each against PyTorch 2.13 (forward, gradients, and LBFGS's iterates)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import FlowserveError, ShapeError

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 5)).astype(np.float32) * 3
B = (RNG.standard_normal((3, 5)).astype(np.float32) + 2.5) * np.where(RNG.random((3, 5)) < 0.5, -1, 1)


def _grads(fn, *arrays):
    """``fn``'s output and its inputs' gradients (of a weighted sum) in flowserve and PyTorch."""
    out = []
    for lib in (flow, torch):
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        y = fn(lib, *xs)
        y.float().sum().backward() if y.dtype.is_floating_point else None
        out.append((y.detach().numpy(), [x.grad.numpy() if x.grad is not None else None for x in xs]))
    return out


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_divide_matches_torch(mode):
    (got, got_g), (ref, ref_g) = _grads(lambda m, a, b: m.divide(a, b, rounding_mode=mode), A, B)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    if mode is None:
        for g, r in zip(got_g, ref_g):
            np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6)
    ints = flow.tensor([7, -7]).divide(flow.tensor([2, 2]), rounding_mode="floor")
    assert ints.tolist() == torch.tensor([7, -7]).divide(torch.tensor([2, 2]), rounding_mode="floor").tolist()


@pytest.mark.parametrize("kwargs", [{}, {"n": 2}, {"dim": 0}, {"n": 3, "dim": 1}, {"n": 6}])
def test_diff_matches_torch_with_gradients(kwargs):
    (got, got_g), (ref, ref_g) = _grads(lambda m, a: m.diff(a, **kwargs), A)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-5)
    if got.size:
        np.testing.assert_allclose(got_g[0], ref_g[0], rtol=1e-6, atol=1e-6)


def _diff_cases(lib):
    x = lib.tensor(A)
    return (lib.diff(x, dim=0, prepend=lib.tensor(B[:1]), append=lib.tensor(B)),
            lib.diff(x, append=lib.tensor(B[:, :2])), x.diff(), lib.diff(x > 0))


def test_diff_prepend_append_and_bool_match_torch():
    for g, r in zip(_diff_cases(flow), _diff_cases(torch)):
        assert g.dtype.name == str(r.dtype).split(".")[-1]
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ShapeError, match="same number of dimensions"):
        flow.diff(flow.tensor(A), append=flow.tensor(1.5))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_matches_torch_with_gradients(indexing):
    xs = [RNG.standard_normal(n).astype(np.float32) for n in (2, 3, 4)]

    def grid(m, a, b, c):
        gx, gy, gz = m.meshgrid(a, b, c, indexing=indexing)
        return gx * 1 + gy * 2 + gz * gz

    (got, got_g), (ref, ref_g) = _grads(grid, *xs)
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    for g, r in zip(got_g, ref_g):
        np.testing.assert_allclose(g, r, rtol=1e-6)
    two = flow.meshgrid([flow.tensor([1, 2]), flow.tensor([3, 4, 5])], indexing=indexing)
    ref = torch.meshgrid([torch.tensor([1, 2]), torch.tensor([3, 4, 5])], indexing=indexing)
    assert [t.tolist() for t in two] == [t.tolist() for t in ref]


def test_diff_and_meshgrid_trace_in_a_graph():
    class G(nn.Graph):
        def build(self, x):
            gx, gy = flow.meshgrid(flow.diff(x, dim=1)[0], x[:, 0], indexing="xy")
            return gx + gy

    x = flow.tensor(A)
    np.testing.assert_allclose(G()(x).numpy(), (lambda a, b: a + b)(
        *flow.meshgrid(flow.diff(x, dim=1)[0], x[:, 0], indexing="xy")).numpy(), rtol=1e-6)


def test_empty_and_friends_take_size_keyword():
    for name in ("empty", "zeros", "ones", "rand", "randn"):
        assert getattr(flow, name)(size=(2, 3)).shape == getattr(torch, name)(size=(2, 3)).shape, name
    assert flow.empty(size=[4], dtype=flow.int64).dtype == flow.int64
    with pytest.raises(TypeError, match="both"):
        flow.zeros(2, size=(2,))


@pytest.mark.parametrize("shape", [(64, 32), (16, 8, 5)])
def test_dropout2d_on_2d_and_3d_input_warns_and_drops_as_torch(shape):
    x = flow.ones(*shape)
    layer = nn.Dropout2d(0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = layer(x).numpy()
    with warnings.catch_warnings(record=True) as torch_caught:
        warnings.simplefilter("always")
        torch.nn.Dropout2d(0.5)(torch.ones(*shape))
    assert len(caught) == len(torch_caught) >= 1
    assert all("dropout2d: Received a" in str(w.message) for w in caught)
    # PyTorch's feature dropout: one draw per (N, C), spread over what follows
    per_channel = out.reshape(shape[0], shape[1], -1)
    assert set(np.unique(out)) <= {0.0, 2.0}
    assert (per_channel.min(-1) == per_channel.max(-1)).all()
    assert 0.3 < (per_channel[..., 0] == 0).mean() < 0.7
    layer.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(layer(x).numpy(), x.numpy())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nn.Dropout2d(0.5)(flow.ones(2, 3, 4, 4))
    assert not caught  # 4-D input: no warning


# -- LBFGS -------------------------------------------------------------------------------------

X = RNG.standard_normal((20, 4)).astype(np.float32)
Y = RNG.standard_normal((20, 2)).astype(np.float32)


def _lbfgs_run(lib, line_search_fn, history_size, start, steps=3):
    model = lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.Tanh(), lib.nn.Linear(3, 2))
    model.load_state_dict({k: lib.tensor(v) for k, v in start.items()})
    opt = lib.optim.LBFGS(model.parameters(), lr=0.7, max_iter=8, history_size=history_size,
                          line_search_fn=line_search_fn)
    x, y = lib.tensor(X), lib.tensor(Y)

    def closure():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss

    trace = []
    for _ in range(steps):
        loss = float(opt.step(closure).detach())
        trace.append((loss, [p.detach().numpy().copy() for p in model.parameters()]))
    return trace, opt.state[next(iter(model.parameters()))]["func_evals"]


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
@pytest.mark.parametrize("history_size", [2, 100])
def test_lbfgs_iterates_match_torch(line_search_fn, history_size):
    start = {k: v.numpy() for k, v in nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).state_dict().items()}
    ref, ref_evals = _lbfgs_run(torch, line_search_fn, history_size, start)
    got, evals = _lbfgs_run(flow, line_search_fn, history_size, start)
    assert evals == ref_evals  # the same number of closure calls: the same decisions
    for (loss, params), (ref_loss, ref_params) in zip(got, ref):
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-4)
        for p, q in zip(params, ref_params):
            np.testing.assert_allclose(p, q, rtol=1e-3, atol=1e-4)
    assert got[-1][0] < 0.9 * got[0][0]  # it really optimises


def test_lbfgs_refuses_bad_options_and_graphs():
    w = nn.Parameter(flow.ones(2))
    with pytest.raises(ValueError, match="strong_wolfe"):
        flow.optim.LBFGS([w], line_search_fn="armijo")
    with pytest.raises(ValueError, match="parameter groups"):
        flow.optim.LBFGS([{"params": [w]}, {"params": [nn.Parameter(flow.ones(1))]}])
    model = nn.Linear(2, 1)

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.LBFGS(model.parameters()))

        def build(self, x):
            loss = self.model(x).sum()
            loss.backward()
            return loss

    with pytest.raises(FlowserveError, match="eagerly"):
        Train()(flow.ones(3, 2))
