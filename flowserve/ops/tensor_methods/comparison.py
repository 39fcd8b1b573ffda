"""``Tensor`` comparisons and logic: ``== != < <= > >=``, ``& | ^ ~`` and their named
methods (``x.eq(y)``, ``x.logical_and(y)``, ``x.isclose(y)``, ...)."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.ops import functional


class ComparisonMethods:
    """Comparison, logical and bitwise operators and methods."""

    __slots__ = ()

    __eq__ = eq = functional.eq
    __ne__ = ne = not_equal = functional.ne
    __lt__ = lt = less = functional.lt
    __le__ = le = less_equal = functional.le
    __gt__ = gt = greater = functional.gt
    __ge__ = ge = greater_equal = functional.ge
    __and__ = __rand__ = bitwise_and = functional.bitwise_and
    __or__ = __ror__ = bitwise_or = functional.bitwise_or
    __xor__ = __rxor__ = bitwise_xor = functional.bitwise_xor
    bitwise_not = functional.bitwise_not
    logical_and, logical_or, logical_xor = functional.logical_and, functional.logical_or, functional.logical_xor
    logical_not = functional.logical_not
    isnan, isinf, isfinite = functional.isnan, functional.isinf, functional.isfinite
    isclose, allclose, equal = functional.isclose, functional.allclose, functional.equal

    def __invert__(self):
        return functional.logical_not(self) if self.dtype is dtypes.bool_ else functional.bitwise_not(self)
