"""Op cases of fake quantization (``flowserve.ops.fake_quant``). Its gradient is the
straight-through estimator, not the derivative of the staircase, so finite differences do
not apply: ``tests/ao`` checks it against PyTorch's ``FakeQuantize``."""

from __future__ import annotations

import numpy as np

from tests.core.op_cases import Case


def _values(shape, spread: float = 3.0):
    return lambda rng: rng.uniform(-spread, spread, shape)


def _scales(shape, low: float = 0.02, high: float = 0.05):
    return lambda rng: rng.uniform(low, high, shape)


def _zero_points(shape, low: int, high: int):
    return lambda rng: rng.integers(low, high, shape).astype(np.float64)


CASES = {
    "fake_quant": [
        Case([_values((2, 3, 4)), _scales(()), _zero_points((), 100, 150)],
             {"quant_min": 0, "quant_max": 255}, grad=False, id="per-tensor-uint8"),
        Case([_values((4, 3, 2, 2)), _scales((4,)), _zero_points((4,), 0, 1)],
             {"quant_min": -64, "quant_max": 64, "axis": 0}, grad=False, id="per-channel-7bit"),
        Case([_values((3, 5)), _scales((1,), 0.1, 0.2), _zero_points((1,), -3, 3)],
             {"quant_min": -128, "quant_max": 127}, grad=False, id="per-tensor-int8-clamped"),
        Case([_values((2, 6)), _scales((6,)), _zero_points((6,), 0, 4)],
             {"quant_min": -512, "quant_max": 511, "axis": -1}, grad=False, id="per-channel-10bit"),
    ],
}
