"""``Tensor`` fills and ``new_*``: ``fill_``, ``zero_``, the random fills (``normal_``,
``uniform_``, ``random_``, ``bernoulli_``) and ``new_zeros``/``new_ones``/``new_full``/...
(a new tensor with this one's dtype and device unless told otherwise)."""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.errors import ShapeError
from flowserve.ops import core_functions, creation, functional, random
from flowserve.ops.generator import rng_of
from flowserve.ops.registry import current_trace
from flowserve.tensor import from_array


def _random_fill(target, sample, traced):
    """Fill ``target`` in place from ``sample(shape)`` eagerly, or ``traced(target)`` (fresh per
    call, see ``flowserve.ops.random``) inside nn.Graph.build."""
    if current_trace() is not None:
        return target._assign(traced(target))
    data = np.asarray(sample(tuple(target.shape))).astype(target.dtype.np)
    return target._assign(from_array(data, None, target.device))


class FillMethods:
    """In-place fills, and new tensors shaped by the caller but typed like this one."""

    __slots__ = ()

    def fill_(self, value):
        value = functional.cast(functional.as_tensor(value, like=self), self.dtype)
        if value.ndim:
            raise ShapeError(f"fill_ expected a number or a 0-d tensor, got size {tuple(value.shape)}")
        return self._assign(functional.expand(value, self.shape))

    def zero_(self):
        return self.fill_(0)

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator=None):
        rng = rng_of(generator)
        return _random_fill(self, lambda shape: rng.normal(mean, std, shape),
                            lambda t: random.normal_as(t, mean, std, generator=generator))

    def uniform_(self, a: float = 0.0, b: float = 1.0, generator=None):
        rng = rng_of(generator)
        return _random_fill(self, lambda shape: rng.uniform(a, b, shape),
                            lambda t: random.uniform_as(t, a, b, generator=generator))

    def random_(self, low: int = 0, high: int | None = None, generator=None):
        rng = rng_of(generator)
        if high is None:
            low, high = 0, low if low else 2 ** 24
        return _random_fill(self, lambda shape: rng.integers(low, high, shape),
                            lambda t: random.integers_from(
                                random.uniform_as(t, low, high, dtypes.float32, generator), low, high, t.dtype))

    def bernoulli_(self, p: float = 0.5, generator=None):
        rng = rng_of(generator)
        return _random_fill(self, lambda shape: rng.random(shape) < p,
                            lambda t: functional.lt(random.uniform_as(t, dtype=dtypes.float32, generator=generator), p))

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return creation.zeros(core_functions._shape_arg(size), dtype=dtype or self.dtype, device=device or self.device,
                              requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        return creation.ones(core_functions._shape_arg(size), dtype=dtype or self.dtype, device=device or self.device,
                             requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
        return creation.empty(core_functions._shape_arg(size), dtype=dtype or self.dtype, device=device or self.device,
                              requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        return creation.full(tuple(size), fill_value, dtype=dtype or self.dtype, device=device or self.device,
                             requires_grad=requires_grad)

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return creation.tensor(data, dtype=dtype or self.dtype, device=device or self.device,
                               requires_grad=requires_grad)
