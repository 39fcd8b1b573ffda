"""Adam (with AMSGrad) and AdamW: OneFlow's update rule (PyTorch's, plus OneFlow's
``do_bias_correction``), written once for eager and graph."""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.optim.foreach import CHUNK, Writer, chunks, run, scalar_step
from flowserve.optim.optimizer import (Optimizer, addcdiv, addcmul, begin_update, check_betas, check_options,
                                      lerp, step_tensor)


def bias_corrections(step, beta1: float, beta2: float):
    """``(1 - beta1**step, sqrt(1 - beta2**step))`` computed in float64 from the step tensor."""
    step64 = ops_functional.cast(step, dtypes.float64)
    return 1 - beta1**step64, ops_functional.sqrt(1 - beta2**step64)


def corrected_denominator(second, step, group: dict):
    """``(correction1, denom)`` of Adam's step ``lr / correction1 * exp_avg / denom``:
    ``1 - beta1**t`` and ``sqrt(second) / sqrt(1 - beta2**t) + eps``, or, with OneFlow's
    ``do_bias_correction=False``, ``1.0`` and ``sqrt(second) + eps``."""
    if not group["do_bias_correction"]:
        return 1.0, ops_functional.sqrt(second) + group["eps"]
    correction1, correction2_sqrt = bias_corrections(step, *group["betas"])
    return correction1, ops_functional.sqrt(second) / correction2_sqrt + group["eps"]


def update_moments(g, state: dict, step, group: dict):
    """Adam's moments (``exp_avg``, ``exp_avg_sq`` and AMSGrad's maximum) moved by ``g`` in
    place; returns ``corrected_denominator`` of them, the step's ``(correction1, denom)``."""
    beta1, beta2 = group["betas"]
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    exp_avg.copy_(lerp(exp_avg, g, 1 - beta1))
    exp_avg_sq.copy_(addcmul(exp_avg_sq * beta2, g, g, 1 - beta2))
    second = exp_avg_sq
    if group["amsgrad"]:
        second = state["max_exp_avg_sq"]
        second.copy_(ops_functional.maximum(second, exp_avg_sq))
    return corrected_denominator(second, step, group)


class Adam(Optimizer):
    """Adam (Kingma & Ba), optionally AMSGrad; ``decoupled_weight_decay=True`` is AdamW.

    >>> import flowserve as flow
    >>> model = flow.nn.Linear(4, 2)
    >>> opt = flow.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), amsgrad=True)

    OneFlow's ``do_bias_correction=False`` steps by ``lr * m / (sqrt(v) + eps)``, without
    dividing by ``1 - beta**t`` (the default ``True`` is PyTorch's rule).

    State per parameter, as PyTorch: ``step`` (0-d float32), ``exp_avg``, ``exp_avg_sq``
    and ``max_exp_avg_sq`` with AMSGrad; nn.Graph names them ``<param>-step``,
    ``<param>-m``, ``<param>-v`` and ``<param>-max_exp_avg_sq``. ``foreach`` as in
    ``SGD`` (eager multi-tensor update unless ``False``); ``fused``, ``capturable`` and
    ``differentiable`` (PyTorch's) and ``contiguous_params`` (OneFlow's memory layout) are
    accepted and change no number.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, do_bias_correction: bool = True,
                 contiguous_params: bool = False, *, maximize: bool = False,
                 decoupled_weight_decay: bool = False, foreach=None, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        name = "AdamW" if decoupled_weight_decay and type(self) is AdamW else type(self).__name__
        check_options(name, lr=lr, eps=eps, weight_decay=weight_decay)
        check_betas(name, betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, do_bias_correction=bool(do_bias_correction),
                                      maximize=maximize, decoupled_weight_decay=decoupled_weight_decay,
                                      foreach=foreach))

    def _init_state(self, p, group) -> dict:
        state = {"step": step_tensor(p),
                 "exp_avg": creation.zeros_like(p), "exp_avg_sq": creation.zeros_like(p)}
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = creation.zeros_like(p)
        return state

    def _update(self, p, g, state, group, lr) -> None:
        weight_decay = group["weight_decay"]
        g, step = begin_update(g, state, group)
        if weight_decay and group["decoupled_weight_decay"]:
            p.copy_(p * (1 - lr * weight_decay))
        elif weight_decay:
            g = g + p * weight_decay
        correction1, denom = update_moments(g, state, step, group)
        p.copy_(addcdiv(p, state["exp_avg"], denom, -(lr / correction1)))

    def _foreach_update(self, params: list, states: list, group: dict, lr: float) -> None:
        """``_update`` of every parameter of ``group``, on numpy arrays in place."""
        writer = Writer(self._owned)
        keys = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
        touched, jobs = list(params), []
        for p, state in zip(params, states):
            step = np.asarray(scalar_step(state["step"]), dtype=np.float64)
            beta1, beta2 = (np.asarray(beta, dtype=np.float64) for beta in group["betas"])
            scalars = dict(step_size=-lr, correction2_sqrt=None)  # as corrected_denominator rounds them
            if group["do_bias_correction"]:
                scalars = dict(step_size=-(lr / (1 - np.power(beta1, step))),
                               correction2_sqrt=np.sqrt(1 - np.power(beta2, step)))
            views = [*writer.target(p), p.grad._data.reshape(-1)]
            for k in keys:
                views += writer.target(state[k])
            touched += [state[k] for k in keys]
            jobs.append((_adam_arrays, views, (group, lr, scalars)))
        run(jobs)
        writer.commit(touched)


def _adam_arrays(views: list, group: dict, lr: float, scalars: dict) -> None:
    """Adam on flat arrays (parameter source and destination, gradient, then source and
    destination of exp_avg, exp_avg_sq and max_exp_avg_sq), chunk by chunk, in
    ``_update``'s order of operations."""
    p_src, p_dst, g, ea_src, ea_dst, sq_src, sq_dst = views[:7]
    n, dt = p_src.size, p_src.dtype.type
    scratch = [np.empty(min(n, CHUNK), dtype=dt) for _ in range(4)]
    beta1, beta2 = group["betas"]
    wd, weight = group["weight_decay"], 1 - beta1  # lerp(exp_avg, g, weight) as optimizer.lerp rounds it
    lerp_w = dt(weight if weight < 0.5 else 1 - weight)
    decay = dt(1 - lr * wd) if group["decoupled_weight_decay"] else dt(wd)
    c2, eps, step_size = scalars["correction2_sqrt"], dt(group["eps"]), dt(scalars["step_size"])
    for s in chunks(n):
        a, b, c, d = (t[: s.stop - s.start] for t in scratch)
        gc, pc = g[s], p_src[s]
        if group["maximize"]:
            gc = np.negative(gc, out=a)
        if wd and group["decoupled_weight_decay"]:
            pc = np.multiply(pc, decay, out=b)
        elif wd:
            gc = np.add(gc, np.multiply(pc, decay, out=b), out=b)
        np.multiply(np.subtract(gc, ea_src[s], out=c), lerp_w, out=c)
        if weight < 0.5:
            np.add(ea_src[s], c, out=ea_dst[s])
        else:
            np.subtract(gc, c, out=ea_dst[s])
        np.multiply(gc if beta2 == 0 else np.multiply(gc, dt(1 - beta2), out=c), gc, out=c)
        second = np.add(np.multiply(sq_src[s], dt(beta2), out=sq_dst[s]), c, out=sq_dst[s])
        if group["amsgrad"]:
            second = np.maximum(views[7][s], second, out=views[8][s])
        root = np.sqrt(second, out=c)
        denom = np.add(root if c2 is None else np.divide(root, dt(c2), out=c), eps, out=c)
        np.add(pc, np.divide(np.multiply(ea_dst[s], step_size, out=d), denom, out=d), out=p_dst[s])


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p -= lr * (step + weight_decay * p)``.
    ``weight_decay`` defaults to 0, as in OneFlow (PyTorch's default is 1e-2);
    ``do_bias_correction`` as in ``Adam``.

    >>> import flowserve as flow
    >>> opt = flow.optim.AdamW(flow.nn.Linear(4, 2).parameters(), lr=1e-3, weight_decay=0.05)
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, do_bias_correction: bool = True,
                 contiguous_params: bool = False, *, maximize: bool = False, foreach=None,
                 capturable: bool = False, differentiable: bool = False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, do_bias_correction, maximize=maximize,
                         decoupled_weight_decay=True, foreach=foreach)
