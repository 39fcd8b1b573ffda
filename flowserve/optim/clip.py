"""Gradient clipping's rule, shared by ``nn.utils.clip_grad_norm_`` and the optimizers'
per-group ``clip_grad_max_norm`` (OneFlow's), eagerly and inside ``nn.Graph.build``."""

from __future__ import annotations

import math

from flowserve.autograd.grad_mode import no_grad
from flowserve.distributed import sbp as sbp_types
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
def _summable(g):
    """A gradient whose elementwise powers can be summed piece by piece: a global
    partial_sum one is all-reduced first (a split or broadcast one is used as it is)."""
    return g.to_global(sbp=sbp_types.broadcast) if g.is_global and g.sbp[0].is_partial else g


def _whole(g):
    """A gradient whose max can be taken on every rank: a global one as broadcast."""
    return g.to_global(sbp=sbp_types.broadcast) if g.is_global else g


def _replicated(term):
    """One gradient's term of the norm, the same on every rank (a sum over a split
    gradient is a partial_sum: all-reduced)."""
    return term.to_global(sbp=sbp_types.broadcast) if term.is_global else term


@no_grad()
def clip_grads_(grads: list, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False):
    """Clip the gradient tensors ``grads`` in place to a joint norm of ``max_norm`` (the rule of
    ``clip_grad_norm_``, also used for OneFlow's per-group ``clip_grad_max_norm``)."""
    if not grads:
        return creation.tensor(0.0)
    norm_type = float(norm_type)
    if norm_type == float("inf"):
        total = ops_functional.amax(
            ops_functional.stack([_replicated(ops_functional.amax(ops_functional.abs(_whole(g)))) for g in grads])
        )
    else:
        sums = [
            _replicated(ops_functional.sum(ops_functional.pow(ops_functional.abs(_summable(g)), norm_type)))
            for g in grads
        ]
        total = ops_functional.pow(ops_functional.sum(ops_functional.stack(sums)), 1.0 / norm_type)
    if error_if_nonfinite and total._lazy is None and not math.isfinite(float(total)):
        raise RuntimeError(f"the total norm of order {norm_type} for gradients from `parameters` is "
                           "non-finite, so it cannot be clipped")
    coef = ops_functional.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    return total
