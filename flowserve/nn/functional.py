"""``flowserve.nn.functional``: the functional forms of the nn modules."""

from __future__ import annotations

from flowserve.ops import functional as F
from flowserve.ops.functional import log_softmax, one_hot, relu, sigmoid, softmax, tanh  # noqa: F401
from flowserve.ops.registry import fail_shape


def linear(x, weight, bias=None):
    """``x @ weight.T + bias``, as ``torch.nn.functional.linear``."""
    if x.shape[-1] != weight.shape[-1]:
        fail_shape("linear", f"input (..., {weight.shape[-1]})", f"{tuple(x.shape)}")
    out = F.matmul(x, F.t(weight))
    return out + bias if bias is not None else out


def _reduce(loss, reduction: str, op: str):
    if reduction == "mean":
        return F.mean(loss)
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"{op} expected reduction 'mean', 'sum' or 'none', got {reduction!r}")


def _same_shape(op: str, input, target) -> None:
    if tuple(input.shape) != tuple(target.shape):
        fail_shape(op, f"target of the input's size {tuple(input.shape)}", tuple(target.shape))


def mse_loss(input, target, reduction: str = "mean"):
    _same_shape("mse_loss", input, target)
    diff = input - target
    return _reduce(diff * diff, reduction, "mse_loss")


def l1_loss(input, target, reduction: str = "mean"):
    _same_shape("l1_loss", input, target)
    return _reduce(F.abs(input - target), reduction, "l1_loss")


def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    """Negative log likelihood of class indices ``target`` (N,) under log-probs ``input`` (N, C)."""
    if input.ndim < 2:
        fail_shape("nll_loss", "input (N, C, ...)", tuple(input.shape))
    if target.dtype.is_floating_point:
        fail_shape("nll_loss", "class indices of an integer dtype as target", f"{target.dtype}")
    expected = (input.shape[0],) + tuple(input.shape[2:])
    if tuple(target.shape) != expected:
        fail_shape("nll_loss", f"target of size {expected}", tuple(target.shape))
    classes = input.shape[1]
    logp = F.permute(input, [0] + list(range(2, input.ndim)) + [1]) if input.ndim > 2 else input
    valid = F.ne(target, ignore_index)
    safe_target = F.where(valid, target, 0)
    hot = one_hot(safe_target, classes, dtype=input.dtype)
    w = hot if weight is None else hot * weight
    w = w * F.cast(F.unsqueeze(valid, -1), input.dtype)
    picked = -F.sum(logp * w, -1)
    if reduction == "mean":
        return F.sum(picked) / F.sum(w)
    return _reduce(picked, reduction, "nll_loss")


def cross_entropy(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0):
    """Softmax cross entropy with class indices, as ``torch.nn.functional.cross_entropy``."""
    logp = log_softmax(input, 1 if input.ndim > 1 else 0)
    if target.dtype.is_floating_point:  # class probabilities
        return _reduce(-F.sum(logp * target, 1), reduction, "cross_entropy")
    loss = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing > 0:
        smooth = -F.mean(logp, 1)
        loss = (1 - label_smoothing) * loss + label_smoothing * _reduce(smooth, reduction, "cross_entropy")
    return loss


def flatten(x, start_dim: int = 1, end_dim: int = -1):
    return F.flatten(x, start_dim, end_dim)


__all__ = ["linear", "mse_loss", "l1_loss", "nll_loss", "cross_entropy", "flatten", "relu",
           "sigmoid", "tanh", "softmax", "log_softmax", "one_hot"]
