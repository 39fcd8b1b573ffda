"""RMSprop (centered and with momentum) and Adagrad: OneFlow's update rules (Adagrad's is PyTorch's)."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.optim.optimizer import (Optimizer, addcdiv, addcmul, begin_update, check_options, lerp,
                                      step_tensor)


class RMSprop(Optimizer):
    """RMSprop (Hinton); ``centered`` normalises by the gradient's estimated variance.

    >>> import flowserve as flow
    >>> opt = flow.optim.RMSprop(flow.nn.Linear(4, 2).parameters(), lr=1e-2, momentum=0.9)

    The rule is OneFlow's (``rmsprop_update``), eps inside the square root: with
    ``d = g + weight_decay * p``, ``v = alpha * v + (1 - alpha) * d**2`` and
    ``p -= lr * d / sqrt(v + eps)``; centered, ``mean = alpha * mean + (1 - alpha) * d`` and
    ``p -= lr * d / sqrt(v - mean**2 + eps)``. PyTorch divides by ``sqrt(v) + eps``. With
    ``momentum`` (which OneFlow documents but refuses), ``buf = momentum * buf + d / sqrt(...)``
    and ``p -= lr * buf``: PyTorch's buffer, and OneFlow's documented formula (``lr`` inside
    the buffer) while ``lr`` is constant. ``lr`` defaults to 1e-3, as in OneFlow (PyTorch:
    1e-2). ``maximize`` (PyTorch's) negates ``g``.

    State per parameter, as PyTorch: ``step``, ``square_avg``, ``momentum_buffer`` (with
    momentum) and ``grad_avg`` (centered).
    """

    def __init__(self, params, lr: float = 1e-3, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False,
                 contiguous_params: bool = False, capturable: bool = False, foreach=None, maximize: bool = False,
                 differentiable: bool = False):
        check_options("RMSprop", lr=lr, eps=eps, weight_decay=weight_decay, momentum=momentum)
        if alpha < 0:
            raise ValueError(f"RMSprop: Invalid alpha value: {alpha}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize))

    def _init_state(self, p, group) -> dict:
        state = {"step": step_tensor(p), "square_avg": creation.zeros_like(p)}
        if group["momentum"] > 0:
            state["momentum_buffer"] = creation.zeros_like(p)
        if group["centered"]:
            state["grad_avg"] = creation.zeros_like(p)
        return state

    def _update(self, p, g, state, group, lr) -> None:
        alpha = group["alpha"]
        g, _ = begin_update(g, state, group)
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        square_avg = state["square_avg"]
        square_avg.copy_(addcmul(square_avg * alpha, g, g, 1 - alpha))
        if group["centered"]:
            grad_avg = state["grad_avg"]
            grad_avg.copy_(lerp(grad_avg, g, 1 - alpha))
            avg = ops_functional.sqrt(addcmul(square_avg, grad_avg, grad_avg, -1) + group["eps"])
        else:
            avg = ops_functional.sqrt(square_avg + group["eps"])
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf.copy_(addcdiv(buf * group["momentum"], g, avg))
            p.copy_(p + buf * (-lr))
        else:
            p.copy_(addcdiv(p, g, avg, -lr))


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.): per-coordinate steps shrinking with the summed squared gradients.

    >>> import flowserve as flow
    >>> opt = flow.optim.Adagrad(flow.nn.Linear(4, 2).parameters(), lr=1e-2, lr_decay=1e-3)

    ``lr`` defaults to 1e-3, as in OneFlow (PyTorch: 1e-2). State per parameter, as PyTorch:
    ``step`` and ``sum`` (created with the optimizer).
    """

    def __init__(self, params, lr: float = 1e-3, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, foreach=None, *,
                 maximize: bool = False, differentiable: bool = False, fused=None):
        check_options("Adagrad", lr=lr, eps=eps, weight_decay=weight_decay)
        if lr_decay < 0 or initial_accumulator_value < 0:
            raise ValueError(f"Adagrad: Invalid lr_decay or initial_accumulator_value: "
                             f"{lr_decay}, {initial_accumulator_value}")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      maximize=maximize))
        for group in self.param_groups:  # PyTorch creates Adagrad's state with the optimizer
            for p in group["params"]:
                self.state_of(p, group)

    def _init_state(self, p, group) -> dict:
        return {"step": step_tensor(p),
                "sum": creation.full_like(p, group["initial_accumulator_value"])}

    def _update(self, p, g, state, group, lr) -> None:
        g, step = begin_update(g, state, group)
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        clr = lr / ((ops_functional.cast(step, dtypes.float64) - 1) * group["lr_decay"] + 1)
        state_sum = state["sum"]
        state_sum.copy_(addcmul(state_sum, g, g))
        std = ops_functional.sqrt(state_sum) + group["eps"]
        p.copy_(addcdiv(p, g, std, -clr))
