"""Adadelta and Adamax: PyTorch's update rules, written once for eager and graph."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.optim.optimizer import (Optimizer, addcdiv, addcmul, begin_update, check_betas, check_options,
                                      lerp, step_tensor)


class Adadelta(Optimizer):
    """Adadelta (Zeiler): ``lr`` scales the ratio of running RMS of updates and gradients.

    >>> import flowserve as flow
    >>> opt = flow.optim.Adadelta(flow.nn.Linear(4, 2).parameters(), lr=1.0, rho=0.9)

    State per parameter, as PyTorch: ``step``, ``square_avg``, ``acc_delta``.
    """

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0,
                 foreach=None, *, capturable: bool = False, maximize: bool = False, differentiable: bool = False):
        check_options("Adadelta", lr=lr, eps=eps, weight_decay=weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Adadelta: Invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _init_state(self, p, group) -> dict:
        return {"step": step_tensor(p), "square_avg": creation.zeros_like(p), "acc_delta": creation.zeros_like(p)}

    def _update(self, p, g, state, group, lr) -> None:
        rho, eps = group["rho"], group["eps"]
        g, _ = begin_update(g, state, group)
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        square_avg, acc_delta = state["square_avg"], state["acc_delta"]
        square_avg.copy_(addcmul(square_avg * rho, g, g, 1 - rho))
        delta = ops_functional.sqrt(acc_delta + eps) / ops_functional.sqrt(square_avg + eps) * g
        acc_delta.copy_(addcmul(acc_delta * rho, delta, delta, 1 - rho))
        p.copy_(p + delta * (-lr))


class Adamax(Optimizer):
    """Adamax (Kingma & Ba): Adam with the infinity norm of past gradients.

    >>> import flowserve as flow
    >>> opt = flow.optim.Adamax(flow.nn.Linear(4, 2).parameters(), lr=2e-3)

    State per parameter, as PyTorch: ``step``, ``exp_avg``, ``exp_inf``.
    """

    def __init__(self, params, lr: float = 2e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, foreach=None, *, maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False):
        check_options("Adamax", lr=lr, eps=eps, weight_decay=weight_decay)
        check_betas("Adamax", betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _init_state(self, p, group) -> dict:
        return {"step": step_tensor(p), "exp_avg": creation.zeros_like(p), "exp_inf": creation.zeros_like(p)}

    def _update(self, p, g, state, group, lr) -> None:
        beta1, beta2 = group["betas"]
        g, step = begin_update(g, state, group)
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
        exp_avg.copy_(lerp(exp_avg, g, 1 - beta1))
        exp_inf.copy_(ops_functional.maximum(exp_inf * beta2, ops_functional.abs(g) + group["eps"]))
        correction = 1 - beta1 ** ops_functional.cast(step, dtypes.float64)
        p.copy_(addcdiv(p, exp_avg, exp_inf, -(lr / correction)))
