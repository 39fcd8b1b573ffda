"""Dropout in a compiled graph: one ONNX Runtime draw decides two elements where ``p`` is
within 0.1% of a multiple of 1/4096 (``paired_rate``), once per element elsewhere. Both
drop at their rate, independently in the two halves, scale by exactly ``1 / (1 - p)``, and
the backward multiplies by the forward's own mask."""

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.exporter.lowering.random import PAIRED_LEVELS, PAIRED_ROUNDING, paired_rate


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


def test_paired_rates_are_p_on_a_1_4096_grid_within_a_thousandth_of_p():
    for p in [k / 100 for k in range(1, 100)] + [0.5, 0.25, 1 / 3]:
        q = paired_rate(p)
        assert q is not None and (q * PAIRED_LEVELS).is_integer(), p
        assert abs(q - p) <= PAIRED_ROUNDING * min(p, 1 - p), (p, q)
    assert paired_rate(0.1) == 410 / 4096 and paired_rate(0.5) == 0.5
    for p in (0.0, 1.0, 1e-4, 0.015, 0.9999):  # too far from the grid, or no draw at all
        assert paired_rate(p) is None, p


@pytest.mark.parametrize("shape", [(1024, 1024), (999, 1001)], ids=["even", "odd-count"])
def test_paired_masks_drop_at_the_rate_in_both_halves_independently(shape):
    flow.manual_seed(0)
    graph, x = Drop(0.1), flow.ones(*shape)
    first, second = graph(x).numpy(), graph(x).numpy()
    assert first.shape == shape and not np.array_equal(first, second)  # fresh draws every call
    np.testing.assert_array_equal(np.unique(first), np.float32([0.0, 1 / 0.9]))  # 1 / (1 - p), not 1 - q
    dropped = _dropped(first)
    half = dropped.size // 2
    q = paired_rate(0.1)
    for part in (dropped[:half], dropped[half:2 * half]):  # the u >= q half and the frac(4096 u) >= q half
        assert _within(part.mean(), q, part.size), part.mean()
    assert abs(np.corrcoef(dropped[:half], dropped[half:2 * half])[0, 1]) < 5 / np.sqrt(half)


def test_a_rate_off_the_grid_draws_once_per_element_at_p_itself():
    flow.manual_seed(0)
    out = Drop(0.015)(flow.ones(1000, 1000)).numpy()
    assert _within(_dropped(out).mean(), 0.015, out.size)
    np.testing.assert_array_equal(np.unique(out), np.float32([0.0, 1 / 0.985]))


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
    assert _within(_dropped(out).mean(), paired_rate(0.1), out.size)


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
