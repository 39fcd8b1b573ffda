"""OneFlow's documented optimizer and scheduler rules, written out in numpy (float64), the
oracle of ``test_optim_oneflow.py`` and ``tests/graph/test_graph_optim_oneflow.py``.

Each function runs the rule over a list of gradient steps for one parameter and returns
the parameter after every step. The update rules are those of OneFlow's kernels
(``oneflow/user/kernels/model_update_kernel_util.h``: ``MomentumUpdateFunctor``,
``AdamUpdateFunctor``, ``RmsPropUpdateFunctor``, ``LambGradFunctor``/``LambUpdateFunctor``),
where an optimizer's ``weight_decay`` is the kernel's ``l2`` (added to the gradient) except
for AdamW and LAMB's ``adam_w_mode``, where it is the decoupled ``weight_decay``.
"""

from __future__ import annotations

import math

import numpy as np


def _f64(p):
    return np.asarray(p, dtype=np.float64).copy()


def sgd(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
    p, buf, out = _f64(p), 0.0, []
    for g in grads:
        d = g + weight_decay * p
        if momentum:
            buf = momentum * buf + (1 - dampening) * d
            d = d + momentum * buf if nesterov else buf
        p = p + lr * d if maximize else p - lr * d
        out.append(p)
    return out


def _moments(m, v, d, beta1, beta2):
    return beta1 * m + (1 - beta1) * d, beta2 * v + (1 - beta2) * d * d


def _corrections(t, betas, do_bias_correction):
    if not do_bias_correction:
        return 1.0, 1.0
    return 1 - betas[0] ** t, 1 - betas[1] ** t


def adam(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
         do_bias_correction=True, decoupled=False):
    """Adam (``decoupled=False``: weight_decay is l2) and AdamW (``decoupled=True``)."""
    p, m, v, max_v, out = _f64(p), 0.0, 0.0, 0.0, []
    l2, wd = (0.0, weight_decay) if decoupled else (weight_decay, 0.0)
    for t, g in enumerate(grads, 1):
        m, v = _moments(m, v, g + l2 * p, *betas)
        max_v = np.maximum(max_v, v)
        bc1, bc2 = _corrections(t, betas, do_bias_correction)
        denom = np.sqrt(max_v if amsgrad else v) / math.sqrt(bc2) + eps
        p = p - lr / bc1 * (m / denom) - lr * wd * p
        out.append(p)
    return out


def rmsprop(p, grads, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, centered=False, momentum=0.0):
    """OneFlow's rule, ``p -= lr * d / sqrt(v [- mean**2] + eps)``; with momentum the
    documented buffer ``buf = momentum * buf + d / sqrt(...)``, ``p -= lr * buf``."""
    p, v, mean, buf, out = _f64(p), 0.0, 0.0, 0.0, []
    for g in grads:
        d = g + weight_decay * p
        v = (1 - alpha) * d * d + alpha * v
        mean = (1 - alpha) * d + alpha * mean
        step = d / np.sqrt((v - mean * mean if centered else v) + eps)
        buf = momentum * buf + step
        p = p - lr * (buf if momentum else step)
        out.append(p)
    return out


def lamb(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, adam_w_mode=True,
         do_bias_correction=True, amsgrad=False):
    p, m, v, max_v, out = _f64(p), 0.0, 0.0, 0.0, []
    for t, g in enumerate(grads, 1):
        m, v = _moments(m, v, g if adam_w_mode else g + weight_decay * p, *betas)
        max_v = np.maximum(max_v, v)
        bc1, bc2 = _corrections(t, betas, do_bias_correction)
        u = (m / bc1) / (np.sqrt(max_v if amsgrad else v) / math.sqrt(bc2) + eps)
        w_norm, u_norm = np.linalg.norm(p), np.linalg.norm(u)
        ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        p = p - lr * ratio * (u + weight_decay * p if adam_w_mode else u)
        out.append(p)
    return out


def warm_restarts_lr(base_lr, step, T_0, T_mult=1, eta_min=0.0, decay_rate=1.0, restart_limit=0):  # noqa: N803
    """OneFlow's ``CosineAnnealingWarmRestarts.get_lr(base_lr, step)``."""
    if T_mult > 1:
        epoch = math.floor(math.log(1 - step / T_0 * (1 - T_mult), T_mult))
        epoch_steps = T_mult**epoch * T_0
        step_in_epoch = step - (1 - T_mult**epoch) / (1 - T_mult) * T_0
    else:
        epoch, epoch_steps = step // T_0, T_0
        step_in_epoch = step - epoch_steps * epoch
    if restart_limit and epoch >= restart_limit:
        return eta_min
    cos_decay = 0.5 * (1 + math.cos(math.pi * step_in_epoch / epoch_steps))
    return eta_min + (base_lr * decay_rate**epoch - eta_min) * cos_decay
