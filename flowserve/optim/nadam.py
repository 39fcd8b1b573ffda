"""NAdam (Nesterov momentum) and RAdam (rectified): PyTorch's update rules, written once for
eager and graph. Their step-dependent scalars are computed from the ``step`` state tensor in
float64, so a compiled graph computes them per call too."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.optim.optimizer import (Optimizer, addcdiv, addcmul, begin_update, check_betas, check_options,
                                      lerp, step_tensor)


def _decayed(p, g, group, lr):
    """Weight decay: decoupled (AdamW-style, on ``p``) or added to the gradient."""
    if not group["weight_decay"]:
        return g
    if group["decoupled_weight_decay"]:
        p.copy_(p * (1 - lr * group["weight_decay"]))
        return g
    return g + p * group["weight_decay"]


def _moments(state, g, beta1: float, beta2: float):
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    exp_avg.copy_(lerp(exp_avg, g, 1 - beta1))
    exp_avg_sq.copy_(addcmul(exp_avg_sq * beta2, g, g, 1 - beta2))
    return exp_avg, exp_avg_sq


class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat), PyTorch's momentum-decay schedule.

    >>> import flowserve as flow
    >>> opt = flow.optim.NAdam(flow.nn.Linear(4, 2).parameters(), lr=2e-3)

    State per parameter, as PyTorch: ``step``, ``mu_product``, ``exp_avg``, ``exp_avg_sq``.
    """

    def __init__(self, params, lr: float = 2e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False,
                 *, foreach=None, maximize: bool = False, capturable: bool = False, differentiable: bool = False):
        check_options("NAdam", lr=lr, eps=eps, weight_decay=weight_decay)
        check_betas("NAdam", betas)
        if momentum_decay < 0:
            raise ValueError(f"NAdam: Invalid momentum_decay value: {momentum_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _init_state(self, p, group) -> dict:
        return {"step": step_tensor(p), "mu_product": creation.ones((), dtype=dtypes.float32, device=p.device),
                "exp_avg": creation.zeros_like(p), "exp_avg_sq": creation.zeros_like(p)}

    def _update(self, p, g, state, group, lr) -> None:
        beta1, beta2 = group["betas"]
        g, step = begin_update(g, state, group)
        g = _decayed(p, g, group, lr)
        step64 = ops_functional.cast(step, dtypes.float64)
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step64 * group["momentum_decay"]))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step64 + 1) * group["momentum_decay"]))
        mu_product = state["mu_product"]
        mu_product.copy_(mu_product * ops_functional.cast(mu, dtypes.float32))
        exp_avg, exp_avg_sq = _moments(state, g, beta1, beta2)
        denom = ops_functional.sqrt(exp_avg_sq / (1 - beta2**step64)) + group["eps"]
        product = ops_functional.cast(mu_product, dtypes.float64)
        p.copy_(addcdiv(p, g, denom, -lr * (1.0 - mu) / (1.0 - product)))
        p.copy_(addcdiv(p, exp_avg, denom, -lr * mu_next / (1.0 - product * mu_next)))


class RAdam(Optimizer):
    """Rectified Adam (Liu et al.): plain momentum SGD until the variance estimate is
    tractable (``rho_t > 5``), then Adam with a rectification factor.

    >>> import flowserve as flow
    >>> opt = flow.optim.RAdam(flow.nn.Linear(4, 2).parameters(), lr=1e-3)

    State per parameter, as PyTorch: ``step``, ``exp_avg``, ``exp_avg_sq``.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False):
        check_options("RAdam", lr=lr, eps=eps, weight_decay=weight_decay)
        check_betas("RAdam", betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

    def _init_state(self, p, group) -> dict:
        return {"step": step_tensor(p), "exp_avg": creation.zeros_like(p), "exp_avg_sq": creation.zeros_like(p)}

    def _update(self, p, g, state, group, lr) -> None:
        beta1, beta2 = group["betas"]
        g, step = begin_update(g, state, group)
        g = _decayed(p, g, group, lr)
        exp_avg, exp_avg_sq = _moments(state, g, beta1, beta2)
        step64 = ops_functional.cast(step, dtypes.float64)
        correction1, correction2 = 1 - beta1**step64, 1 - beta2**step64
        corrected = exp_avg / ops_functional.cast(correction1, exp_avg.dtype)
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step64 * (beta2**step64) / correction2
        rect = ops_functional.sqrt(
            ops_functional.clamp((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t), min=0.0)
        )
        adaptive = ops_functional.sqrt(correction2) / (ops_functional.sqrt(exp_avg_sq) + group["eps"])
        rectified = corrected * lr * ops_functional.cast(adaptive * rect, corrected.dtype)
        p.copy_(p - ops_functional.where(rho_t > 5.0, rectified, corrected * lr))
