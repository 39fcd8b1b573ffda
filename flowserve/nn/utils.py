"""``flowserve.nn.utils``: gradient clipping (PyTorch's rules), eager and inside nn.Graph.build."""

from __future__ import annotations

import math

from flowserve.autograd.grad_mode import no_grad
from flowserve.ops import creation
from flowserve.ops import functional as F
from flowserve.tensor import Tensor


def _grads(parameters) -> list:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p.grad for p in params if p.grad is not None]


@no_grad()
def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None):
    """Scale gradients in place so that their joint ``norm_type`` norm is at most ``max_norm``;
    returns the norm before clipping. Inside ``nn.Graph.build`` (after ``loss.backward()``)
    the gradients are the graph's symbolic ones, so the clipping becomes part of the step.

    >>> import flowserve as flow
    >>> w = flow.nn.Parameter(flow.ones(4))
    >>> (w * 3).sum().backward()
    >>> float(flow.nn.utils.clip_grad_norm_([w], 1.0))
    6.0
    """
    return clip_grads_(_grads(parameters), max_norm, norm_type, error_if_nonfinite)


@no_grad()
def clip_grads_(grads: list, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False):
    """Clip the gradient tensors ``grads`` in place to a joint norm of ``max_norm`` (the rule of
    ``clip_grad_norm_``, also used for OneFlow's per-group ``clip_grad_max_norm``)."""
    if not grads:
        return creation.tensor(0.0)
    norm_type = float(norm_type)
    if norm_type == float("inf"):
        total = F.amax(F.stack([F.amax(F.abs(g)) for g in grads]))
    else:
        sums = [F.sum(F.pow(F.abs(g), norm_type)) for g in grads]
        total = F.pow(F.sum(F.stack(sums)), 1.0 / norm_type)
    if error_if_nonfinite and total._lazy is None and not math.isfinite(float(total)):
        raise RuntimeError(f"the total norm of order {norm_type} for gradients from `parameters` is "
                           "non-finite, so it cannot be clipped")
    coef = F.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient element into ``[-clip_value, clip_value]`` in place."""
    for g in _grads(parameters):
        g.clamp_(-clip_value, clip_value)
