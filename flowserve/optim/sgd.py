"""SGD with momentum, dampening, Nesterov, weight decay and maximize: OneFlow's update rule."""

from __future__ import annotations

import numpy as np

from flowserve.ops import creation
from flowserve.optim.foreach import CHUNK, Writer, chunks, run
from flowserve.optim.optimizer import Optimizer, check_options


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with momentum.

    >>> import flowserve as flow
    >>> model = flow.nn.Linear(4, 2)
    >>> opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)

    The rule is OneFlow's (``momentum_update``): with ``d = g + weight_decay * p``,
    ``buf = momentum * buf + (1 - dampening) * d`` from a zero buffer (the first step is
    damped too, PyTorch's is not), the step ``s = buf`` (Nesterov: ``d + momentum * buf``,
    with any dampening) and ``p -= lr * s``; ``maximize`` gives ``p += lr * s``, the decay term
    included (PyTorch negates only the gradient). Without momentum, ``s = d``.

    ``foreach=None`` (default) or ``True`` runs eager steps as one multi-tensor update
    (``flowserve.optim.foreach``), ``False`` as the per-parameter functional update that
    nn.Graph compiles; both compute the same numbers. ``differentiable`` and ``fused``
    (PyTorch's) and ``contiguous_params`` (OneFlow's memory layout) are accepted and change
    no number.
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False,
                 contiguous_params: bool = False, fused=None, *, foreach=None, differentiable: bool = False):
        check_options("SGD", lr=lr, weight_decay=weight_decay, momentum=momentum)
        if nesterov and momentum <= 0:
            raise ValueError("SGD: Nesterov momentum requires a momentum")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                                      foreach=foreach))

    def _init_state(self, p, group) -> dict:
        return {"momentum_buffer": creation.zeros_like(p)} if group["momentum"] else {}

    def _update(self, p, g, state, group, lr) -> None:
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        momentum = group["momentum"]
        if momentum:
            buf = state["momentum_buffer"]
            damped = g * (1 - group["dampening"]) if group["dampening"] else g
            buf.copy_(buf * momentum + damped)
            g = g + buf * momentum if group["nesterov"] else buf
        p.copy_(p + g * (lr if group["maximize"] else -lr))

    def _foreach_update(self, params: list, states: list, group: dict, lr: float) -> None:
        """``_update`` of every parameter of ``group``, on numpy arrays in place."""
        writer = Writer(self._owned)
        touched, jobs = list(params), []
        for p, state in zip(params, states):
            views = [*writer.target(p), p.grad._data.reshape(-1)]
            if group["momentum"]:
                touched.append(state["momentum_buffer"])
                views += writer.target(state["momentum_buffer"])
            jobs.append((_sgd_arrays, views, (group, lr)))
        run(jobs)
        writer.commit(touched)


def _sgd_arrays(views: list, group: dict, lr: float) -> None:
    """SGD on flat arrays (parameter source and destination, gradient, momentum buffer
    source and destination), chunk by chunk, in ``_update``'s order of operations."""
    p_src, p_dst, g = views[:3]
    buf = views[3:] or None
    n, dt = p_src.size, p_src.dtype.type
    scratch = [np.empty(min(n, CHUNK), dtype=dt) for _ in range(2)]
    momentum, wd, keep = dt(group["momentum"]), dt(group["weight_decay"]), dt(1 - group["dampening"])
    rate = dt(lr if group["maximize"] else -lr)
    for s in chunks(n):
        b, c = (t[: s.stop - s.start] for t in scratch)
        gc = g[s]
        if group["weight_decay"]:
            gc = np.add(gc, np.multiply(p_src[s], wd, out=b), out=b)
        if buf is not None:
            bs, bd = buf[0][s], buf[1][s]
            damped = np.multiply(gc, keep, out=c) if group["dampening"] else gc
            np.add(np.multiply(bs, momentum, out=bd), damped, out=bd)
            gc = np.add(gc, np.multiply(bd, momentum, out=c), out=c) if group["nesterov"] else bd
        np.add(p_src[s], np.multiply(gc, rate, out=c), out=p_dst[s])
