"""LAMB (You et al., "Large Batch Optimization for Deep Learning"): OneFlow's signature and
update rule, written once for eager and graph.

Each parameter takes Adam's step, scaled by its own trust ratio: with ``d`` the gradient
(plus ``weight_decay * p`` when ``adam_w_mode=False``), ``m`` and ``v`` Adam's moments and
``u = (m / (1 - beta1**t)) / (sqrt(v) / sqrt(1 - beta2**t) + eps)`` (without the two
corrections when ``do_bias_correction=False``),

    ratio = ||p|| / ||u||   (1 when either norm is 0)
    p    -= lr * ratio * (u + weight_decay * p)    # adam_w_mode=True (decoupled, the default)
    p    -= lr * ratio * u                          # adam_w_mode=False (the L2 term is in d)

as OneFlow's ``lamb_update`` kernel computes it (the norms are over the whole parameter,
``||p||`` before the update).
"""

from __future__ import annotations

from flowserve.dispatch import current_trace
from flowserve.errors import GraphError
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.optim.adam import update_moments
from flowserve.optim.optimizer import Optimizer, check_betas, check_options, step_tensor


def trust_ratio(p, u):
    """``||p|| / ||u||`` as a 0-d tensor, or 1 where either norm is 0."""
    w_norm = ops_functional.sqrt(ops_functional.sum(p * p))
    u_norm = ops_functional.sqrt(ops_functional.sum(u * u))
    both = ops_functional.logical_and(ops_functional.gt(w_norm, 0.0), ops_functional.gt(u_norm, 0.0))
    return ops_functional.where(both, w_norm / ops_functional.where(both, u_norm, 1.0), 1.0)


def _refuse_flattened(p) -> None:
    """In a graph, ``p`` must be a parameter itself: the trust ratio of a ZeRO shard (a slice
    of several parameters concatenated) is not any parameter's. A fused model update leaves
    LAMB's parameters alone (``ELEMENTWISE_UPDATE``)."""
    trace = current_trace()
    if trace is not None and not any(p is t for t in trace.state_tensors.values()):
        raise GraphError(
            f"LAMB updates each parameter with its own trust ratio ||p|| / ||step||, but nn.Graph gave it a "
            f"flattened tensor of {p.numel()} elements (a ZeRO shard of several parameters): "
            "train with LAMB without config.enable_zero")


class LAMB(Optimizer):
    """LAMB: Adam with a per-parameter trust ratio, for large batches.

    >>> import flowserve as flow
    >>> model = flow.nn.Linear(4, 2)
    >>> opt = flow.optim.LAMB(model.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)

    ``adam_w_mode=True`` (default) decays weights decoupled from the gradient, ``False`` adds
    ``weight_decay * p`` to the gradient (L2); ``do_bias_correction`` as in OneFlow's Adam.
    ``amsgrad=True``, which OneFlow refuses, divides by the running maximum of ``v`` as Adam's
    AMSGrad does. ``contiguous_params`` (OneFlow's memory layout) changes no number. State per
    parameter: ``step``, ``exp_avg``, ``exp_avg_sq`` (and ``max_exp_avg_sq``); nn.Graph names
    them ``<param>-step``, ``<param>-m``, ``<param>-v``.
    """

    ELEMENTWISE_UPDATE = False  # the trust ratio reads the whole parameter

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, adam_w_mode: bool = True, do_bias_correction: bool = True,
                 amsgrad: bool = False, contiguous_params: bool = False):
        check_options("LAMB", lr=lr, eps=eps, weight_decay=weight_decay)
        check_betas("LAMB", betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      adam_w_mode=bool(adam_w_mode), do_bias_correction=bool(do_bias_correction),
                                      amsgrad=bool(amsgrad)))

    def _init_state(self, p, group) -> dict:
        state = {"step": step_tensor(p), "exp_avg": creation.zeros_like(p), "exp_avg_sq": creation.zeros_like(p)}
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = creation.zeros_like(p)
        return state

    def _update(self, p, g, state, group, lr) -> None:
        _refuse_flattened(p)
        weight_decay, decoupled = group["weight_decay"], group["adam_w_mode"]
        step = state["step"]
        step.copy_(step + 1)
        if weight_decay and not decoupled:
            g = g + p * weight_decay
        correction1, denom = update_moments(g, state, step, group)
        exp_avg = state["exp_avg"]
        if not isinstance(correction1, float):
            exp_avg = exp_avg / ops_functional.cast(correction1, exp_avg.dtype)
        u = exp_avg / denom
        direction = u + p * weight_decay if weight_decay and decoupled else u
        p.copy_(p - direction * (trust_ratio(p, u) * lr))
