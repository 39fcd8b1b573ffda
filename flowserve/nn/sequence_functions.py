"""Bags and sequences: ``embedding_bag`` and ``ctc_loss``, composites of the registry's
primitives (so they differentiate, trace into ``nn.Graph`` and export with no rules of their
own; ONNX has no EmbeddingBag or CTC op).

- ``embedding_bag``: the embedding rows of each bag, weighted by a (bag, position) matrix
  built from ``offsets`` with comparisons (so offsets may be a graph input), then summed
  (a matrix product), averaged or maxed.
- ``ctc_loss``: the CTC forward (alpha) recursion in log space over the blank-extended
  targets, one step per time frame: a three-way ``logsumexp`` of the previous alphas and
  their shifts by one and two labels, plus the frame's log-probabilities gathered at the
  labels. Frames past a sample's input length keep its alphas; the loss reads them at the
  sample's target length. Unreachable states hold a large finite negative number instead of
  ``-inf``, so no gradient is ever ``inf * 0``; a loss that stayed there is infinite.
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops.autocast_policy import float32
from flowserve.ops.indexing import take
from flowserve.ops.padding import pad
from flowserve.ops.registry import fail_dtype, fail_shape


__all__ = ["embedding_bag", "ctc_loss"]

_MODES = ("sum", "mean", "max")


def _int_tensor(v, device):
    return v if hasattr(v, "shape") else creation.tensor(np.asarray(v, dtype=np.int64), device=device)


def _bag_matrix(offsets, n: int, include_last_offset: bool, dtype):
    """(bags, n): 1 where position i belongs to bag b (``offsets[b] <= i < end[b]``)."""
    offsets = ops_functional.cast(offsets, dtypes.int64)
    if include_last_offset:
        starts, ends = (
            ops_functional.slice_axis(offsets, 0, 0, offsets.shape[0] - 1),
            ops_functional.slice_axis(offsets, 0, 1, offsets.shape[0]),
        )
    else:
        starts = offsets
        ends = pad(ops_functional.slice_axis(offsets, 0, 1, offsets.shape[0]), [0, 1], value=n)
    pos = ops_functional.unsqueeze(creation.arange(n, dtype=dtypes.int64, device=offsets.device), 0)
    inside = ops_functional.logical_and(
        ops_functional.ge(pos, ops_functional.unsqueeze(starts, 1)),
        ops_functional.lt(pos, ops_functional.unsqueeze(ends, 1)),
    )
    return ops_functional.cast(inside, dtype)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type: float = 2.0,  # noqa: A002
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights=None, include_last_offset: bool = False, padding_idx=None):
    """``torch.nn.functional.embedding_bag``: sums, means or maxima of bags of embedding rows.

    ``input`` is (B, L) (each row a bag) or 1-D with ``offsets`` (bag starts; with
    ``include_last_offset`` one more, the end of the last bag). Entries equal to
    ``padding_idx`` take no part (nor count in a mean); an empty bag gives zeros.
    ``per_sample_weights`` (``input``'s shape) scale each row, with ``mode="sum"``. The
    gradient is dense (``sparse=True`` gives the same values as a dense tensor).
    """
    if mode not in _MODES:
        raise ValueError(f"embedding_bag expected mode 'sum', 'mean' or 'max', got {mode!r}")
    if max_norm is not None or scale_grad_by_freq:
        raise ValueError("embedding_bag: max_norm and scale_grad_by_freq are not in flowserve; renormalise the "
                         "weight yourself (weight.data.renorm) and leave scale_grad_by_freq=False")
    if weight.ndim != 2:
        fail_shape("embedding_bag", "a weight (num_embeddings, embedding_dim)", tuple(weight.shape))
    if input.dtype.is_floating_point or input.dtype is dtypes.bool_:
        fail_dtype("embedding_bag", "integer indices", input.dtype)
    if per_sample_weights is not None:
        if mode != "sum":
            raise ValueError(f"embedding_bag: per_sample_weights is only supported for mode='sum', got mode={mode!r}")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            fail_shape("embedding_bag", f"per_sample_weights of the input's shape {tuple(input.shape)}",
                       tuple(per_sample_weights.shape))
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets has to be None if input is 2-D (each row is a bag), "
                             f"got offsets of shape {tuple(offsets.shape)}")
    elif input.ndim == 1:
        if offsets is None or offsets.ndim != 1:
            fail_shape("embedding_bag", "1-D offsets with a 1-D input",
                       None if offsets is None else tuple(offsets.shape))
    else:
        fail_shape("embedding_bag", "input (B, L), or 1-D input with offsets", tuple(input.shape))
    num = weight.shape[0]
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise ValueError(f"embedding_bag expected padding_idx within num_embeddings={num}, got {padding_idx}")
        padding_idx %= num
    rows = take(weight, input, axis=0)  # input's shape + (E,)
    keep = ops_functional.cast(ops_functional.ne(input, padding_idx), weight.dtype) if padding_idx is not None else None
    if input.ndim == 1:  # (bags, n) membership, then every bag over all positions
        member = _bag_matrix(offsets, input.shape[0], include_last_offset, weight.dtype)
        if keep is not None:
            member = member * ops_functional.unsqueeze(keep, 0)
        scale = member if per_sample_weights is None else member * ops_functional.unsqueeze(per_sample_weights, 0)
        if mode == "max":
            return _bag_max(ops_functional.unsqueeze(rows, 0), member)
        out = ops_functional.matmul(scale, rows)
    else:
        member = keep if keep is not None else None
        if mode == "max":
            return _bag_max(
                rows,
                member if member is not None else ops_functional.cast(ops_functional.eq(input, input), weight.dtype),
            )
        scale = member
        if per_sample_weights is not None:
            scale = per_sample_weights if scale is None else scale * per_sample_weights
        out = ops_functional.sum(rows if scale is None else rows * ops_functional.unsqueeze(scale, -1), 1)
        if mode == "mean" and member is None:
            return out / float(input.shape[1]) if input.shape[1] else out
    if mode == "mean":
        count = ops_functional.sum(member, -1, keepdim=True)
        out = out / ops_functional.maximum(count, ops_functional.scalar_tensor(1.0, weight.dtype, weight.device))
    return out


def _bag_max(rows, member):
    """Per bag the elementwise maximum of its rows (``member`` (bags, n)); zeros for an empty bag."""
    inside = ops_functional.gt(ops_functional.unsqueeze(member, -1), 0)
    lowest = ops_functional.scalar_tensor(float("-inf"), rows.dtype, rows.device)
    best = ops_functional.amax(ops_functional.where(inside, rows, lowest), 1)
    filled = ops_functional.gt(ops_functional.sum(member, 1, keepdim=True), 0)
    return ops_functional.where(filled, best, ops_functional.scalar_tensor(0.0, rows.dtype, rows.device))


# -- CTC ------------------------------------------------------------------------------------------

_UNREACHABLE = -1e30  # log-probability of a state no alignment reaches (exp of it is exactly 0)


def _lse(*terms):
    """log(sum(exp(terms))) with the maximum taken out (held constant: the gradient does not
    depend on it); terms at ``_UNREACHABLE`` contribute exactly 0."""
    top = terms[0]
    for t in terms[1:]:
        top = ops_functional.maximum(top, t)
    top = top.detach()
    total = None
    for t in terms:
        e = ops_functional.exp(t - top)
        total = e if total is None else total + e
    return top + ops_functional.log(total)


def _shift(alpha, k: int):
    """``alpha`` moved right by ``k`` labels along the last dim, unreachable states coming in."""
    return ops_functional.slice_axis(pad(alpha, [k, 0], value=_UNREACHABLE), alpha.ndim - 1, 0, alpha.shape[-1])


def _concrete(t) -> bool:
    """Whether ``t``'s values are known now (eager, or a constant inside a trace)."""
    return getattr(t, "_lazy", None) is None


def _padded_targets(targets, target_lengths, n: int):
    """(N, S) targets from PyTorch's two layouts: already padded, or concatenated (1-D)."""
    if targets.ndim == 2:
        if targets.shape[0] != n:
            fail_shape("ctc_loss", f"padded targets (N={n}, S)", tuple(targets.shape))
        return targets
    total = targets.shape[0]
    if _concrete(target_lengths):
        lengths = target_lengths.numpy()
        if int(lengths.sum()) != total:
            raise ValueError(f"ctc_loss: concatenated targets hold {total} labels but target_lengths add up to "
                             f"{int(lengths.sum())}")
        width = max(int(lengths.max()) if lengths.size else 0, 1)
    else:  # lengths known only at run time: room for all labels in every row
        width = max(total, 1)
    starts = ops_functional.unsqueeze(ops_functional.cumsum(target_lengths, 0) - target_lengths, 1)
    index = starts + ops_functional.unsqueeze(creation.arange(width, dtype=dtypes.int64, device=targets.device), 0)
    index = ops_functional.minimum(index, ops_functional.scalar_tensor(max(total - 1, 0), dtypes.int64, targets.device))
    if total == 0:
        return ops_functional.cast(index * 0, targets.dtype)
    return take(targets, index, axis=0)


@float32
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank: int = 0, reduction: str = "mean",
             zero_infinity: bool = False):
    """``torch.nn.functional.ctc_loss``: the negative log-likelihood of ``targets`` under all
    alignments of ``log_probs`` (T, N, C) (or (T, C) for one sequence).

    ``targets`` are padded (N, S) or concatenated (sum of ``target_lengths``);
    ``input_lengths``/``target_lengths`` are tensors or sequences of ints. ``reduction="mean"``
    divides each loss by its target length, then averages (PyTorch's rule). An impossible
    alignment (a target too long for its input) gives ``inf``, or 0 with ``zero_infinity``.

    The gradient with respect to ``log_probs`` is PyTorch's: ``exp(log_probs) - posterior``
    over the frames within each input length, which is the gradient of the logits when
    ``log_probs = log_softmax(logits)`` (the ``exp(log_probs)`` part is a term of value 0).
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"ctc_loss expected reduction 'mean', 'sum' or 'none', got {reduction!r}")
    if not log_probs.dtype.is_floating_point:
        fail_dtype("ctc_loss", "floating point log_probs", log_probs.dtype)
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs = ops_functional.unsqueeze(log_probs, 1)
        targets = ops_functional.unsqueeze(targets, 0) if hasattr(targets, "shape") else targets
    if log_probs.ndim != 3:
        fail_shape("ctc_loss", "log_probs (T, N, C) or (T, C)", tuple(log_probs.shape))
    steps, n, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise ValueError(f"ctc_loss expected blank within the {classes} classes, got {blank}")
    device = log_probs.device
    input_lengths = ops_functional.cast(ops_functional.reshape(_int_tensor(input_lengths, device), (-1,)), dtypes.int64)
    target_lengths = ops_functional.cast(
        ops_functional.reshape(_int_tensor(target_lengths, device), (-1,)), dtypes.int64
    )
    targets = _int_tensor(targets, device)
    for name, t in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if t.shape[0] != n:
            fail_shape("ctc_loss", f"{name} of {n} values (one per sequence)", tuple(t.shape))
    if _concrete(input_lengths):
        lengths = input_lengths.numpy()
        if lengths.size and (lengths.max() > steps or lengths.min() < 0):
            raise ValueError(f"ctc_loss expected input_lengths within [0, {steps}] (log_probs' T), got "
                             f"{lengths.tolist()}")
    labels = ops_functional.cast(_padded_targets(targets, target_lengths, n), dtypes.int64)  # (N, S)
    width = labels.shape[1]
    blanks = ops_functional.cast(labels * 0 + blank, dtypes.int64)
    ext = ops_functional.reshape(ops_functional.stack([blanks, labels], 2), (n, 2 * width))
    ext = ops_functional.cast(
        pad(ext, [0, 1], value=blank), dtypes.int64
    )  # (N, 2S+1): blank, l1, blank, l2, ..., blank
    states = 2 * width + 1
    gathered = ops_functional.gather(
        log_probs, 2, ops_functional.expand(ops_functional.unsqueeze(ext, 0), (steps, n, states))
    )  # (T, N, 2S+1)
    before = ops_functional.cast(ops_functional.slice_axis(pad(ext, [2, 0], value=blank), 1, 0, states), dtypes.int64)
    skip = ops_functional.logical_and(ops_functional.ne(ext, blank), ops_functional.ne(ext, before))  # s-2 -> s allowed
    position = creation.arange(states, dtype=dtypes.int64, device=device)
    unreachable = ops_functional.scalar_tensor(_UNREACHABLE, log_probs.dtype, device)
    alpha = ops_functional.where(ops_functional.lt(position, 2), ops_functional.getitem(gathered, 0), unreachable)
    alive = ops_functional.unsqueeze(input_lengths, 1)
    if steps == 0:
        alpha = ops_functional.expand(unreachable, (n, states))
    for t in range(1, steps):
        step = _lse(
            alpha, _shift(alpha, 1), ops_functional.where(skip, _shift(alpha, 2), unreachable)
        ) + ops_functional.getitem(gathered, t)
        alpha = ops_functional.where(ops_functional.gt(alive, t), step, alpha)
    last = ops_functional.unsqueeze(2 * target_lengths, 1)
    end_blank = ops_functional.squeeze(ops_functional.gather(alpha, 1, last), 1)
    end_label = ops_functional.where(ops_functional.gt(target_lengths, 0),
                        ops_functional.squeeze(ops_functional.gather(alpha, 1, ops_functional.maximum(last - 1, ops_functional.scalar_tensor(0, dtypes.int64, device))), 1),
                        unreachable)
    likelihood = _lse(end_blank, end_label)
    impossible = ops_functional.logical_or(
        ops_functional.lt(likelihood, _UNREACHABLE / 2), ops_functional.le(input_lengths, 0)
    )
    loss = ops_functional.where(
        impossible, ops_functional.scalar_tensor(float("inf"), log_probs.dtype, device), -likelihood
    )
    # PyTorch's gradient adds exp(log_probs) over the frames within each input length: a term of value 0
    frames = ops_functional.cast(ops_functional.lt(ops_functional.unsqueeze(creation.arange(steps, dtype=dtypes.int64, device=device), 1),
                         ops_functional.unsqueeze(input_lengths, 0)), log_probs.dtype)
    probs = ops_functional.exp(log_probs)
    loss = loss + ops_functional.sum(
        ops_functional.sum((probs - probs.detach()) * ops_functional.unsqueeze(frames, -1), 2), 0
    )
    if zero_infinity:
        loss = ops_functional.where(impossible, ops_functional.scalar_tensor(0.0, log_probs.dtype, device), loss)
    if reduction == "none":
        return ops_functional.squeeze(loss, 0) if unbatched else loss
    if reduction == "sum":
        return ops_functional.sum(loss)
    divisor = ops_functional.cast(
        ops_functional.maximum(target_lengths, ops_functional.scalar_tensor(1, dtypes.int64, device)), log_probs.dtype
    )
    return ops_functional.mean(loss / divisor)
