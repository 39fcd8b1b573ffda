"""Dropout in a compiled graph: one ONNX Runtime draw decides two elements
(``paired_thresholds``). Both halves drop at ``p``, independently, scale by exactly
``1 / (1 - p)``, and the backward multiplies by the forward's own mask."""

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.onnx_backend.lowering.random import paired_thresholds


class Drop(nn.Graph):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def build(self, x):
        return nn.functional.dropout(x, self.p)


def _dropped(out: np.ndarray) -> np.ndarray:
    return (out == 0).ravel()


def _within(rate: float, expected: float, count: int, sigmas: float = 5.0) -> bool:
    return abs(rate - expected) <= sigmas * np.sqrt(expected * (1 - expected) / count)


@pytest.mark.parametrize("p", [0.1, 0.015, 0.5, 0.9, 1e-4, 1 / 3])
def test_one_draw_keeps_the_second_element_with_probability_1_minus_p_either_way(p):
    low, middle, high = paired_thresholds(p)
    assert low <= middle == p <= high
    # u uniform on [0, 1): the second element is kept on [low, p) and on [high, 1)
    assert (1 - high) / (1 - p) == pytest.approx(1 - p, rel=1e-12)  # given the first kept
    assert (p - low) / p == pytest.approx(1 - p, rel=1e-12)  # given the first dropped


@pytest.mark.parametrize("p", [0.1, 0.015])
@pytest.mark.parametrize("shape", [(1024, 1024), (999, 1001)], ids=["even", "odd-count"])
def test_paired_masks_drop_at_p_in_both_halves_independently(shape, p):
    flow.manual_seed(0)
    graph, x = Drop(p), flow.ones(*shape)
    first, second = graph(x).numpy(), graph(x).numpy()
    assert first.shape == shape and not np.array_equal(first, second)  # fresh draws every call
    np.testing.assert_array_equal(np.unique(first), np.float32([0.0, 1 / (1 - p)]))
    dropped = _dropped(first)
    half = dropped.size // 2
    one, two = dropped[:half], dropped[half:2 * half]  # u >= p, and the other decision
    for part in (one, two):
        assert _within(part.mean(), p, part.size), part.mean()
    assert _within((one & two).mean(), p * p, half)  # both dropped: p**2 if independent
    assert abs(np.corrcoef(one, two)[0, 1]) < 5 / np.sqrt(half)


class Scaled(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.w = nn.Parameter(flow.ones(*shape))

    def forward(self, x):
        return self.w * x


class DropStep(nn.Graph):
    def __init__(self, model, p):
        super().__init__()
        self.model, self.p = model, p
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=1.0))

    def build(self, x):
        out = nn.functional.dropout(self.model(x), self.p)
        out.sum().backward()
        return out


def test_the_backward_multiplies_by_the_forwards_mask_over_1_minus_p():
    model = Scaled((512, 256))
    out = DropStep(model, 0.1)(flow.ones(512, 256)).numpy()
    grad = 1.0 - model.w.numpy()  # SGD with lr 1 from ones: the gradient itself
    np.testing.assert_array_equal(grad, out)  # d(sum(w * mask / (1 - p)))/dw: the same mask, the same scale
    assert _within(_dropped(out).mean(), 0.1, out.size)


def test_a_graph_with_p_zero_dropout_trains_as_eager():
    rng = np.random.default_rng(0)
    x, y = flow.tensor(rng.standard_normal((16, 8)).astype(np.float32)), flow.tensor(rng.integers(0, 3, 16))

    def model():
        flow.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.0), nn.Linear(16, 3))

    eager, compiled = model(), model()
    eager_loss = nn.CrossEntropyLoss()(eager(x), y)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model, self.loss_fn = compiled, nn.CrossEntropyLoss()
            self.add_optimizer(flow.optim.SGD(compiled.parameters(), lr=0.1))

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    np.testing.assert_allclose(float(Step()(x, y)), float(eager_loss), rtol=1e-6)
