"""Normalisation layers as composites of primitives (no gradient or lowering of their own).

``batch_norm`` in training mode normalises with the batch's statistics and updates the
running statistics in place (``copy_``, which records a state update inside
``nn.Graph.build``), with PyTorch's unbiased running variance. In one process its
training-mode normalisation is the primitive ``batch_norm_train`` (``flowserve.ops.batch_norm``),
whose gradient is in closed form; ONNX's own training-mode BatchNormalization keeps a biased
running variance and is missing from ONNX Runtime's inference builds. ``layer_norm`` is the
primitive ``layer_norm_stats`` (``flowserve.ops.layer_norm``), also with a closed-form gradient.
"""

from __future__ import annotations

import math

from flowserve.autograd.grad_mode import no_grad
from flowserve.ops import collective
from flowserve.ops import functional
from flowserve.ops.autocast_policy import like_input
from flowserve.ops.batch_norm import batch_norm_train
from flowserve.ops.layer_norm import layer_norm_stats
from flowserve.ops.registry import fail_shape


def _channel_shape(x) -> list:
    return [1, x.shape[1]] + [1] * (x.ndim - 2)


def _update_running(running, batch_value, momentum) -> None:
    with no_grad():
        running.copy_(running * (1 - momentum) + batch_value * momentum)


def _train_local(x, running_mean, running_var, weight, bias, momentum, eps: float, count: int):
    """One process's training-mode batch norm: the ``batch_norm_train`` primitive (closed-form
    gradient), then the running statistics."""
    c = x.shape[1]
    if weight is None or bias is None:
        weight = functional.expand(functional.scalar_tensor(1, x.dtype, x.device), [c]) if weight is None else weight
        bias = functional.expand(functional.scalar_tensor(0, x.dtype, x.device), [c]) if bias is None else bias
    y, mean, var = batch_norm_train(x, weight, bias, eps=float(eps))
    if running_mean is not None:
        _update_running(running_mean, mean.detach(), momentum)
    if running_var is not None:
        _update_running(running_var, var.detach() * (count / (count - 1)), momentum)
    return y


def _synced_stats(x, axes: list, count: int):
    """Mean and biased variance over every rank's batch, in two passes as one process
    computes them on the whole batch (the ranks' batches may differ in size)."""
    total = collective.all_reduce(functional.scalar_tensor(float(count), x.dtype, x.device))
    mean = collective.all_reduce(functional.sum(x, axes, keepdim=True)) / total
    centered = x - mean
    var = collective.all_reduce(functional.sum(centered * centered, axes, keepdim=True)) / total
    return mean, centered, var, total


@like_input
def batch_norm(x, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum=0.1, eps: float = 1e-5, op: str = "batch_norm", sync: bool = False):
    """Batch normalisation over all dims but the channel dim 1, as ``torch.nn.functional.batch_norm``.

    ``momentum`` may be a tensor (the cumulative average of ``BatchNorm(momentum=None)``).
    ``sync``: the batch statistics are those of the batches of all ranks together
    (``nn.SyncBatchNorm``), summed with the ``all_reduce`` collective.
    """
    if x.ndim < 2:
        fail_shape(op, "input (N, C, ...)", tuple(x.shape))
    c = x.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            fail_shape(op, f"{name} of size ({c},) for input {tuple(x.shape)}", tuple(t.shape))
    shape = _channel_shape(x)
    if training:
        count = x.numel() // c
        if count <= 1:
            raise ValueError(f"{op} expected more than 1 value per channel when training, "
                             f"got input size {tuple(x.shape)}")
        if not sync:
            return _train_local(x, running_mean, running_var, weight, bias, momentum, eps, count)
        axes = [0] + list(range(2, x.ndim))
        mean, centered, var, count = _synced_stats(x, axes, count)
        scale = functional.rsqrt(var + eps)
        if weight is not None:
            scale = scale * functional.reshape(weight, shape)
        y = centered * scale
        if running_mean is not None:
            _update_running(running_mean, functional.reshape(mean, [c]).detach(), momentum)
        if running_var is not None:
            _update_running(running_var, functional.reshape(var, [c]).detach() * (count / (count - 1)), momentum)
        return y + functional.reshape(bias, shape) if bias is not None else y
    if running_mean is None or running_var is None:
        raise ValueError(f"{op} in eval mode needs running_mean and running_var")
    scale = functional.rsqrt(running_var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    return x * functional.reshape(scale, shape) + functional.reshape(shift, shape)


def _normalize_last(x, axes: list, eps: float):
    mean = functional.mean(x, axes, keepdim=True)
    centered = x - mean
    var = functional.mean(centered * centered, axes, keepdim=True)
    return centered * functional.rsqrt(var + eps)


@like_input
def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Normalise over the trailing ``normalized_shape`` dims, as ``torch.nn.functional.layer_norm``:
    the ``layer_norm_stats`` primitive (one ONNX ``LayerNormalization``, a closed-form gradient)."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(normalized_shape)
    if tuple(x.shape[x.ndim - k:]) != normalized_shape or x.ndim < k:
        fail_shape("layer_norm", f"input (*, {', '.join(map(str, normalized_shape))})", tuple(x.shape))
    if x.is_global:  # the composite, whose reductions take any sbp (a split normalised dim too)
        y = _normalize_last(x, list(range(x.ndim - k, x.ndim)), eps)
        y = y * weight if weight is not None else y
        return y + bias if bias is not None else y
    if weight is None:
        weight = functional.expand(functional.scalar_tensor(1, x.dtype, x.device), list(normalized_shape))
    if bias is None:
        bias = functional.expand(functional.scalar_tensor(0, x.dtype, x.device), list(normalized_shape))
    return layer_norm_stats(x, weight, bias, eps=float(eps), dims=k)[0]


@like_input
def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalise channel groups per sample, as ``torch.nn.functional.group_norm``."""
    if x.ndim < 2 or x.shape[1] % num_groups:
        fail_shape("group_norm", f"input (N, C, ...) with C divisible by num_groups={num_groups}",
                   tuple(x.shape))
    n, c = x.shape[:2]
    grouped = functional.reshape(x, (n, num_groups, math.prod(x.shape[1:]) // num_groups))
    y = functional.reshape(_normalize_last(grouped, [2], eps), x.shape)
    shape = _channel_shape(x)
    if weight is not None:
        y = y * functional.reshape(weight, shape)
    return y + functional.reshape(bias, shape) if bias is not None else y
