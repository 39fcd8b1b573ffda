"""SGD with momentum, dampening, Nesterov, weight decay and maximize (PyTorch's update rule)."""

from __future__ import annotations

import numpy as np

from flowserve.ops import creation
from flowserve.optim.foreach import CHUNK, Writer, chunks, run, scalar_step
from flowserve.optim.optimizer import Optimizer, check_options


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with momentum.

    >>> import flowserve as flow
    >>> model = flow.nn.Linear(4, 2)
    >>> opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)

    ``foreach=None`` (default) or ``True`` runs eager steps as one multi-tensor update
    (``flowserve.optim.foreach``), ``False`` as the per-parameter functional update that
    nn.Graph compiles; both compute the same numbers. ``differentiable`` and ``fused`` are
    accepted for PyTorch compatibility.
    """

    PRIVATE_STATE = ("started",)

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach=None, differentiable: bool = False, fused=None):
        check_options("SGD", lr=lr, weight_decay=weight_decay, momentum=momentum)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                                      foreach=foreach))

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

    def _foreach_update(self, params: list, states: list, group: dict, lr: float) -> None:
        """``_update`` of every parameter of ``group``, on numpy arrays in place."""
        writer = Writer(self._owned)
        touched, jobs = list(params), []
        for p, state in zip(params, states):
            views = [*writer.target(p), p.grad._data.reshape(-1)]
            coef = None
            if group["momentum"]:
                touched.append(state["momentum_buffer"])
                views += writer.target(state["momentum_buffer"])
                if group["dampening"]:
                    coef = p._data.dtype.type(1) - state["started"]._data * p._data.dtype.type(group["dampening"])
                    scalar_step(state["started"], 1)
            jobs.append((_sgd_arrays, views, (coef, group, lr)))
        run(jobs)
        writer.commit(touched)


def _sgd_arrays(views: list, coef, group: dict, lr: float) -> None:
    """SGD on flat arrays (parameter source and destination, gradient, momentum buffer
    source and destination), chunk by chunk, in ``_update``'s order of operations."""
    p_src, p_dst, g = views[:3]
    buf = views[3:] or None
    n, dt = p_src.size, p_src.dtype.type
    scratch = [np.empty(min(n, CHUNK), dtype=dt) for _ in range(3)]
    momentum, wd = dt(group["momentum"]), dt(group["weight_decay"])
    for s in chunks(n):
        a, b, c = (t[: s.stop - s.start] for t in scratch)
        gc = g[s]
        if group["maximize"]:
            gc = np.negative(gc, out=a)
        if group["weight_decay"]:
            gc = np.add(gc, np.multiply(p_src[s], wd, out=b), out=b)
        if buf is not None:
            bs, bd = buf[0][s], buf[1][s]
            if coef is not None:
                np.multiply(gc, coef, out=c)
                np.add(np.multiply(bs, momentum, out=bd), c, out=bd)
            else:
                np.add(np.multiply(bs, momentum, out=bd), gc, out=bd)
            gc = np.add(gc, np.multiply(bd, momentum, out=c), out=c) if group["nesterov"] else bd
        np.add(p_src[s], np.multiply(gc, dt(-lr), out=c), out=p_dst[s])
