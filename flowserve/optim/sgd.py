"""SGD with momentum, dampening, Nesterov and weight decay (PyTorch's update rule)."""

from __future__ import annotations

from flowserve.ops import creation
from flowserve.optim.optimizer import Optimizer


class SGD(Optimizer):
    """``flow.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)``."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD expected lr, momentum and weight_decay >= 0, got {lr}, {momentum}, {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize))

    def _init_state(self, p, group) -> dict:
        if not group["momentum"]:
            return {}
        state = {"momentum_buffer": creation.zeros_like(p)}
        if group["dampening"]:
            state["started"] = creation.zeros((), dtype=p.dtype, device=p.device)
        return state

    def _update(self, p, g, state, group, lr) -> None:
        if group["maximize"]:
            g = -g
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        momentum = group["momentum"]
        if momentum:
            buf = state["momentum_buffer"]
            if group["dampening"]:
                # PyTorch starts the buffer at the first gradient, undamped
                started = state["started"]
                buf.copy_(buf * momentum + g * (1 - group["dampening"] * started))
                started.fill_(1)
            else:
                buf.copy_(buf * momentum + g)
            g = g + buf * momentum if group["nesterov"] else buf
        p.copy_(p - g * lr)
