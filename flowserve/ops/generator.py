"""Random state: ``Generator`` and the default generator that ``flow.manual_seed`` seeds.

Every eager random op draws from ``rng_of(generator)``; a compiled ``nn.Graph`` takes one
seed per call from ``Generator.draw_seed``.
"""

from __future__ import annotations

import numpy as np


class Generator:
    """A seeded source of random numbers (``flowserve.Generator().manual_seed(0)``)."""

    def __init__(self, seed: int | None = None):
        self.manual_seed(seed if seed is not None else np.random.SeedSequence().entropy % (2**63))

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self.rng = np.random.default_rng(self._seed)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def draw_seed(self) -> np.ndarray:
        """The next seed this generator gives a compiled ``nn.Graph`` (one per call), as
        an int64 0-d array below ``2**31 - 1``."""
        return np.asarray(self.rng.integers(0, (1 << 31) - 1), dtype=np.int64)


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Seed flowserve's default generator, as ``flow.manual_seed(0)``."""
    return default_generator.manual_seed(seed)


def rng_of(generator: Generator | None) -> np.random.Generator:
    """The numpy generator of ``generator``, or of the default one."""
    return (generator or default_generator).rng
