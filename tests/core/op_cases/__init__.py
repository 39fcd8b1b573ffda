"""The op-case table that drives the registry tests: one module per op family.

Each module defines ``CASES: dict[str, list[Case]]`` keyed by primitive name. Every
registered primitive needs at least one case; each case is checked for ONNX Runtime
parity of its lowering and, for differentiable primitives, for finite-difference
gradients. Add a family by adding a module here; it is found automatically.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Case:
    """Inputs and attributes of one primitive call.

    ``inputs``: per input, a shape (standard-normal float64 values) or a callable
    ``rng -> ndarray`` (integers, positive values, masks...). ``attrs``: the primitive's
    attributes. ``grad``: False to skip the finite-difference check for this case (e.g.
    at a kink). ``tol``: finite-difference tolerance.
    """

    inputs: list
    attrs: dict = field(default_factory=dict)
    grad: bool = True
    tol: float = 1e-6
    id: str = ""

    def arrays(self, rng: np.random.Generator) -> list[np.ndarray]:
        out = []
        for spec in self.inputs:
            out.append(spec(rng) if callable(spec) else rng.standard_normal(spec))
        return out


def positive(shape) -> Callable:
    return lambda rng: rng.uniform(0.5, 2.0, shape)


def away_from_zero(shape) -> Callable:
    """Values with |x| >= 0.1: no kinks of relu/abs/max within the finite-difference step."""
    return lambda rng: rng.choice([-1.0, 1.0], shape) * rng.uniform(0.1, 2.0, shape)


def integers(shape, low: int, high: int, dtype=np.int64) -> Callable:
    return lambda rng: rng.integers(low, high, shape).astype(dtype)


def booleans(shape) -> Callable:
    return lambda rng: rng.random(shape) > 0.5


def all_cases() -> dict:
    cases: dict = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, family in module.CASES.items():
            cases.setdefault(name, []).extend(family)
    return cases
