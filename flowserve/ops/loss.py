"""Loss functions as composites, with PyTorch's reductions, weights and edge rules."""

from __future__ import annotations

from flowserve.ops import functional
from flowserve.ops.autocast_policy import float32
from flowserve.ops.registry import fail_dtype, fail_shape

REDUCTIONS = ("mean", "sum", "none")


def reduce(loss, reduction: str, op: str):
    if reduction == "mean":
        return functional.mean(loss)
    if reduction == "sum":
        return functional.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"{op} expected reduction 'mean', 'sum' or 'none', got {reduction!r}")


def _same_shape(op: str, input, target) -> None:
    if tuple(input.shape) != tuple(target.shape):
        fail_shape(op, f"target of the input's size {tuple(input.shape)}", tuple(target.shape))


@float32
def mse_loss(input, target, reduction: str = "mean"):
    _same_shape("mse_loss", input, target)
    diff = input - target
    return reduce(diff * diff, reduction, "mse_loss")


@float32
def l1_loss(input, target, reduction: str = "mean"):
    _same_shape("l1_loss", input, target)
    return reduce(functional.abs(input - target), reduction, "l1_loss")


@float32
def smooth_l1_loss(input, target, reduction: str = "mean", beta: float = 1.0):
    """Squared below ``beta``, absolute above (``beta=0`` is the L1 loss)."""
    _same_shape("smooth_l1_loss", input, target)
    diff = functional.abs(input - target)
    if beta == 0:
        return reduce(diff, reduction, "smooth_l1_loss")
    loss = functional.where(functional.lt(diff, beta), diff * diff * (0.5 / beta), diff - 0.5 * beta)
    return reduce(loss, reduction, "smooth_l1_loss")


@float32
def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0):
    _same_shape("huber_loss", input, target)
    diff = functional.abs(input - target)
    loss = functional.where(functional.lt(diff, delta), diff * diff * 0.5, (diff - 0.5 * delta) * delta)
    return reduce(loss, reduction, "huber_loss")


@float32
def binary_cross_entropy(input, target, weight=None, reduction: str = "mean"):
    """``-(t log x + (1 - t) log(1 - x))`` with logs clamped at -100, as PyTorch."""
    _same_shape("binary_cross_entropy", input, target)
    log_x = functional.maximum(functional.log(input), -100.0)
    log_1mx = functional.maximum(functional.log(1.0 - input), -100.0)
    loss = -(target * log_x + (1.0 - target) * log_1mx)
    if weight is not None:
        loss = loss * weight
    return reduce(loss, reduction, "binary_cross_entropy")


@float32
def binary_cross_entropy_with_logits(input, target, weight=None, reduction: str = "mean", pos_weight=None):
    """Sigmoid + binary cross entropy in one stable expression, as PyTorch."""
    _same_shape("binary_cross_entropy_with_logits", input, target)
    max_val = functional.relu(-input)
    log_terms = (
        functional.log(functional.exp(-max_val) + functional.exp(-input - max_val)) + max_val
    )  # log(1 + exp(-x))
    if pos_weight is not None:
        log_terms = log_terms * ((pos_weight - 1.0) * target + 1.0)
    loss = (1.0 - target) * input + log_terms
    if weight is not None:
        loss = loss * weight
    return reduce(loss, reduction, "binary_cross_entropy_with_logits")


def _class_last(x):
    """(N, C, d1, ...) -> (N, d1, ..., C)."""
    return functional.permute(x, [0] + list(range(2, x.ndim)) + [1]) if x.ndim > 2 else x


def _check_class_target(op: str, input, target) -> None:
    if input.ndim < 2:
        fail_shape(op, "input (N, C, ...)", tuple(input.shape))
    if target.dtype.is_floating_point:
        fail_dtype(op, "class indices of an integer dtype as target", target.dtype)
    expected = (input.shape[0],) + tuple(input.shape[2:])
    if tuple(target.shape) != expected:
        fail_shape(op, f"target of size {expected} for input {tuple(input.shape)}", tuple(target.shape))


def _picked_weights(input, target, weight, ignore_index: int):
    """Per target element: its class's weight (0 where ignored), and the one-hot of its class."""
    valid = functional.ne(target, ignore_index)
    hot = functional.one_hot(functional.where(valid, target, 0), input.shape[1], dtype=input.dtype)
    hot = hot * functional.cast(functional.unsqueeze(valid, -1), input.dtype)
    w = functional.sum(hot * weight, -1) if weight is not None else functional.sum(hot, -1)
    return w, hot


@float32
def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    """Negative log likelihood of class indices ``target`` under log-probabilities ``input``."""
    if input.ndim == 1:
        return nll_loss(
            functional.unsqueeze(input, 0), functional.unsqueeze(target, 0), weight, ignore_index, reduction
        )
    _check_class_target("nll_loss", input, target)
    w, hot = _picked_weights(input, target, weight, ignore_index)
    picked = -functional.sum(_class_last(input) * hot, -1)
    if weight is not None:
        picked = picked * w
    if reduction == "mean":
        return functional.sum(picked) / functional.sum(w)
    return reduce(picked, reduction, "nll_loss")


def _class_weight_view(weight, ndim: int):
    return functional.reshape(weight, [1, weight.shape[0]] + [1] * (ndim - 2)) if weight is not None else None


@float32
def cross_entropy(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0):
    """Softmax cross entropy with class indices or class probabilities, label smoothing,
    class weights and ``ignore_index``, exactly as ``torch.nn.functional.cross_entropy``."""
    if input.ndim == 1:
        target = functional.unsqueeze(target, 0)
        loss = cross_entropy(functional.unsqueeze(input, 0), target, weight, ignore_index, reduction, label_smoothing)
        return functional.squeeze(loss, 0) if reduction == "none" else loss
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy expected label_smoothing in [0, 1], got {label_smoothing}")
    logp = functional.log_softmax(input, 1)
    classes = input.shape[1]
    w_view = _class_weight_view(weight, input.ndim)
    if target.dtype.is_floating_point:  # class probabilities
        _same_shape("cross_entropy", input, target)
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / classes
        weighted = logp * target if w_view is None else logp * target * w_view
        loss = -functional.sum(weighted, 1)
        if reduction == "mean":
            return functional.sum(loss) * (classes / input.numel())
        return reduce(loss, reduction, "cross_entropy")
    loss = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0:
        return loss
    _check_class_target("cross_entropy", input, target)
    smooth = -functional.sum(logp if w_view is None else logp * w_view, 1)
    smooth = smooth * functional.cast(functional.ne(target, ignore_index), input.dtype)
    if reduction == "mean":
        w, _ = _picked_weights(input, target, weight, ignore_index)
        smooth = functional.sum(smooth) / functional.sum(w)
    else:
        smooth = reduce(smooth, reduction, "cross_entropy")
    return loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)


@float32
def kl_div(input, target, reduction: str = "mean", log_target: bool = False):
    _same_shape("kl_div", input, target)
    if log_target:
        loss = functional.exp(target) * (target - input)
    else:
        safe = functional.where(functional.gt(target, 0), target, 1.0)
        loss = functional.where(functional.gt(target, 0), target * (functional.log(safe) - input), 0.0)
    if reduction == "batchmean":
        return functional.sum(loss) * (1.0 / input.shape[0])
    return reduce(loss, reduction, "kl_div")


__all__ = ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "nll_loss", "cross_entropy", "kl_div"]
