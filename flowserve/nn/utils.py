"""``flowserve.nn.utils``: gradient clipping (PyTorch's rules), eager and inside nn.Graph.build."""

from __future__ import annotations

from flowserve.autograd.grad_mode import no_grad
from flowserve.optim.clip import clip_grads_
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
def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient element into ``[-clip_value, clip_value]`` in place."""
    for g in _grads(parameters):
        g.clamp_(-clip_value, clip_value)
