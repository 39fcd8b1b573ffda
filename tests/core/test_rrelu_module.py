"""``nn.RReLU`` (PyTorch's and OneFlow's signature): in evaluation the fixed slope
``(lower + upper) / 2``, checked against torch 2.13, forward and backward; in training a slope
per element drawn from ``U(lower, upper)``, checked by its distribution; in ``nn.Graph`` the
evaluation gives eager's numbers and training draws from the same distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flowserve as flow
import flowserve.nn as nn

N = 20000
BOUNDS = [(1.0 / 8, 1.0 / 3), (0.1, 0.3), (0.0, 0.5), (0.2, 0.2)]


def _x(shape=(4, 5)) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _kolmogorov_smirnov_uniform(draws: np.ndarray, lower: float, upper: float) -> float:
    """The largest distance between the draws' empirical CDF and U(lower, upper)'s."""
    s = np.sort((draws.astype(np.float64) - lower) / (upper - lower))
    n = len(s)
    return float(max((np.arange(1, n + 1) / n - s).max(), (s - np.arange(n) / n).max()))


def _check_slopes(slopes: np.ndarray, lower: float, upper: float) -> None:
    assert slopes.min() >= lower - 1e-6 and slopes.max() <= upper + 1e-6
    if upper > lower:
        assert _kolmogorov_smirnov_uniform(slopes, lower, upper) < 1.95 / np.sqrt(len(slopes))  # 0.1% level
        assert len(np.unique(slopes)) > len(slopes) // 2  # one draw per element


def test_signature_defaults_and_repr_match_torch():
    for args in [(), (0.1, 0.3), (0.1, 0.3, True)]:
        assert repr(nn.RReLU(*args)) == repr(torch.nn.RReLU(*args))
    m = nn.RReLU()
    assert (m.lower, m.upper, m.inplace) == (1.0 / 8, 1.0 / 3, False)
    assert nn.RReLU(lower=0.2, upper=0.4, inplace=True).inplace


@pytest.mark.parametrize("lower,upper", BOUNDS)
def test_evaluation_matches_torch_forward_and_backward(lower, upper):
    x = _x()
    ours = flow.tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    out = nn.RReLU(lower, upper).eval()(ours)
    expected = torch.nn.RReLU(lower, upper).eval()(theirs)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-6, atol=1e-7)
    weights = _x()
    (out * flow.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_inplace_writes_into_the_input_as_torch_does():
    x = _x()
    ours, theirs = flow.tensor(x), torch.tensor(x)
    out = nn.RReLU(0.1, 0.3, inplace=True).eval()(ours)
    torch.nn.RReLU(0.1, 0.3, inplace=True).eval()(theirs)
    assert out is ours
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("lower,upper", BOUNDS)
def test_training_draws_a_uniform_slope_per_element(lower, upper):
    m = nn.RReLU(lower, upper)
    assert m.training
    x = flow.tensor(np.concatenate([-np.ones(N, np.float32), np.full(8, 2.0, np.float32)]), requires_grad=True)
    out = m(x)
    slopes = -out.numpy()[:N]
    _check_slopes(slopes, lower, upper)
    np.testing.assert_array_equal(out.numpy()[N:], 2.0)  # positive inputs pass unchanged
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy()[:N], slopes, rtol=1e-6)  # the gradient is the drawn slope
    np.testing.assert_array_equal(x.grad.numpy()[N:], 1.0)
    torch_slopes = -torch.nn.RReLU(lower, upper)(-torch.ones(N)).numpy()  # the oracle passes the same check
    _check_slopes(torch_slopes, lower, upper)


def test_training_draws_follow_the_seed():
    x = flow.tensor(-np.ones(100, np.float32))
    flow.manual_seed(7)
    first = nn.RReLU()(x).numpy()
    second = nn.RReLU()(x).numpy()
    flow.manual_seed(7)
    np.testing.assert_array_equal(nn.RReLU()(x).numpy(), first)
    assert not np.array_equal(first, second)


def test_lower_above_upper_is_an_error():
    with pytest.raises(ValueError, match="0 <= lower <= upper"):
        nn.RReLU(0.5, 0.1)(flow.ones(3))


class _Apply(nn.Graph):
    def __init__(self, module):
        super().__init__()
        self.module = module

    def build(self, x):
        return self.module(x)


def test_graph_in_evaluation_gives_eager_numbers():
    model = nn.Sequential(nn.Linear(5, 6), nn.RReLU(0.1, 0.4), nn.Linear(6, 3)).eval()
    x = flow.tensor(_x((7, 5)))
    np.testing.assert_allclose(_Apply(model)(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_graph_in_training_draws_a_uniform_slope_per_element_and_call():
    graph = _Apply(nn.RReLU(0.1, 0.3))
    x = flow.tensor(-np.ones(N, np.float32))
    first, second = -graph(x).numpy(), -graph(x).numpy()
    _check_slopes(first, 0.1, 0.3)
    _check_slopes(second, 0.1, 0.3)
    assert not np.array_equal(first, second)
