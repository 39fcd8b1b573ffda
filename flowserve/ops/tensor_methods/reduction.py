"""``Tensor`` reductions and scans: ``sum``, ``mean``, ``max``, ``argmax``, ``var``, ``norm``,
``all``/``any``, ``cumsum``, ..."""

from __future__ import annotations

from flowserve.ops import functional


class ReductionMethods:
    """Reductions over dimensions (and the running ``cumsum``)."""

    __slots__ = ()

    def sum(self, dim=None, keepdim=False, dtype=None):  # noqa: A003 - PyTorch's method name
        return functional.sum(self, dim, keepdim, dtype)

    mean, nansum, nanmean = functional.mean, functional.nansum, functional.nanmean
    amax, amin, argmax, argmin = functional.amax, functional.amin, functional.argmax, functional.argmin
    max, min = functional.max_, functional.min_  # noqa: A003
    all, any = functional.all_, functional.any_  # noqa: A003
    var, std, prod = functional.var, functional.std, functional.prod
    logsumexp, norm, trace = functional.logsumexp, functional.norm, functional.trace
    count_nonzero, cumsum, diff = functional.count_nonzero, functional.cumsum, functional.diff
    sum_to = functional.sum_to
