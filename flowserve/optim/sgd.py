"""SGD with momentum, dampening, Nesterov, weight decay and maximize (PyTorch's update rule)."""

from __future__ import annotations

from flowserve.ops import creation
from flowserve.optim.optimizer import Optimizer, check_options


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with momentum.

    >>> import flowserve as flow
    >>> model = flow.nn.Linear(4, 2)
    >>> opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)

    ``foreach``, ``differentiable`` and ``fused`` are accepted for PyTorch compatibility;
    flowserve has one implementation, the functional update nn.Graph also compiles.
    """

    PRIVATE_STATE = ("started",)

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach=None, differentiable: bool = False, fused=None):
        check_options("SGD", lr=lr, weight_decay=weight_decay, momentum=momentum)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize))

    def _init_state(self, p, group) -> dict:
        if not group["momentum"]:
            return {}
        state = {"momentum_buffer": creation.zeros_like(p)}
        if group["dampening"]:
            state["started"] = creation.zeros((), dtype=p.dtype, device=p.device)
        return state

    def _after_load_state(self, state: dict, loaded: dict) -> None:
        if "started" in state and loaded.get("momentum_buffer") is not None:
            state["started"].fill_(1)

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
                buf.copy_(buf * momentum + g * (1 - started * group["dampening"]))
                started.fill_(1)
            else:
                buf.copy_(buf * momentum + g)
            g = g + buf * momentum if group["nesterov"] else buf
        p.copy_(p + g * (-lr))
