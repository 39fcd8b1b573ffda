"""Random numbers that stay random inside ``nn.Graph``.

Eagerly, every random function draws from flowserve's default generator (``flow.manual_seed``)
or the ``generator`` given. Inside ``nn.Graph.build`` they record one of two primitives,
``uniform_like`` and ``normal_like`` (ONNX ``RandomUniformLike``/``RandomNormalLike``), so
a compiled graph draws fresh values on every call instead of freezing the trace's draw.
Each random node of a graph gets its own seed, derived from the graph's seed
(``GraphIR.attrs["random_seed"]``), which is drawn from flowserve's default generator when
the graph is traced: ``flow.manual_seed(s)`` before a graph's first call makes its
sequence of draws repeatable. Eager and graph draws are different numbers.

``rand``, ``randn``, ``randint``, ``randperm``, the ``*_like`` forms, ``bernoulli``,
``multinomial`` and the in-place fills are composites of these two primitives in a graph.
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.ops import creation as C
from flowserve.ops import functional as F
from flowserve.ops.functional_index import argsort, cumsum, topk
from flowserve.ops.registry import Meta, current_trace, fail_dtype, fail_shape, primitive

RANDOM_PRIMITIVES = ("uniform_like", "normal_like", "dropout_mask")


def _float_like(op: str):
    def meta(x: Meta, **attrs) -> Meta:
        if not x.dtype.is_floating_point:
            fail_dtype(op, "a floating point tensor (its shape and dtype are used)", x.dtype)
        if "std" in attrs and not attrs["std"] > 0:  # ONNX Runtime aborts on a zero scale
            fail_shape(op, "std > 0 (a zero std is the mean: the composites emit no draw)", attrs["std"])
        return x

    return meta


@primitive("uniform_like", shape=_float_like("uniform_like"), differentiable=False)
def uniform_like(xp, x, low: float, high: float):
    return xp.asarray(C.default_generator.rng.uniform(low, high, x.shape)).astype(x.dtype)


@primitive("normal_like", shape=_float_like("normal_like"), differentiable=False)
def normal_like(xp, x, mean: float, std: float):
    return xp.asarray(C.default_generator.rng.normal(mean, std, x.shape)).astype(x.dtype)


# -- composites used while tracing ------------------------------------------------------------


def _base(size: tuple, dtype, device):
    """A tensor of shape ``size`` (batch dims kept symbolic) whose only use is its shape."""
    return F.expand(F.scalar_tensor(0, dtype, device), list(size))


def _float_base(like, dtype):
    dtype = dtypes.as_dtype(dtype) if dtype is not None else like.dtype
    base_dtype = dtype if dtype.is_floating_point else dtypes.float32
    return like if like.dtype is base_dtype else F.cast(like, base_dtype), dtype


def traced_uniform(size: tuple, dtype, device, low: float = 0.0, high: float = 1.0):
    return uniform_like(_base(size, dtype, device), low=float(low), high=float(high))


def traced_normal(size: tuple, dtype, device, mean: float = 0.0, std: float = 1.0):
    base = _base(size, dtype, device)
    return normal_like(base, mean=float(mean), std=float(std)) if std != 0 else base + float(mean)


def uniform_as(like, low: float = 0.0, high: float = 1.0, dtype=None):
    base, dtype = _float_base(like, dtype)
    return F.cast(uniform_like(base, low=float(low), high=float(high)), dtype)


def normal_as(like, mean: float = 0.0, std: float = 1.0, dtype=None):
    base, dtype = _float_base(like, dtype)
    if std == 0:
        return F.cast(F.expand(F.scalar_tensor(float(mean), base.dtype, base.device), list(base.shape)), dtype)
    return F.cast(normal_like(base, mean=float(mean), std=float(std)), dtype)


def integers_from(uniform, low: int, high: int, dtype):
    """Integers in ``[low, high)`` from uniform draws in ``[low, high)``."""
    return F.cast(F.clamp(F.floor(uniform), max=float(high - 1)), dtypes.as_dtype(dtype or dtypes.int64))


def traced_randperm(n: int, dtype, device):
    return F.cast(argsort(traced_uniform((n,), dtypes.float32, device)), dtypes.as_dtype(dtype or dtypes.int64))


# -- user-facing random functions ---------------------------------------------------------------


def _tracing() -> bool:
    return current_trace() is not None


def bernoulli(input, p=None, *, generator=None):  # noqa: A002 - PyTorch's argument name
    """1 with probability ``input`` (or ``p``) elementwise, else 0, in ``input``'s dtype
    (``torch.bernoulli``).

    >>> import flowserve as flow
    >>> flow.bernoulli(flow.tensor([0.0, 1.0])).tolist()
    [0.0, 1.0]
    """
    probs = input if p is None else F.expand(F.scalar_tensor(float(p), input.dtype, input.device),
                                             list(input.shape))
    if _tracing():
        return F.cast(F.lt(uniform_as(probs), probs), input.dtype)
    draws = C._rng(generator).random(tuple(input.shape))
    return C._make((draws < probs.numpy()).astype(input.dtype.np), None, input.device)


def multinomial(input, num_samples: int, replacement: bool = False, *, generator=None):  # noqa: A002
    """Indices drawn from the rows of ``input`` (non-negative weights), ``num_samples`` per
    row, with or without replacement (``torch.multinomial``); int64.

    >>> import flowserve as flow
    >>> flow.multinomial(flow.tensor([0.0, 0.0, 1.0]), 2, replacement=True).tolist()
    [2, 2]
    """
    if input.ndim not in (1, 2):
        fail_shape("multinomial", "a 1-d or 2-d tensor of weights", tuple(input.shape))
    n = input.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError(f"multinomial: cannot sample n_sample > prob_dist.size(-1) samples without "
                           f"replacement (n_sample={num_samples}, size={n})")
    if _tracing():
        return _traced_multinomial(input, num_samples, replacement)
    weights = np.atleast_2d(input.numpy().astype(np.float64))
    if (weights < 0).any() or not np.isfinite(weights).all() or (weights.sum(-1) <= 0).any():
        raise RuntimeError("multinomial: probability tensor contains either inf, nan or element < 0, "
                           "or a row that sums to 0")
    rng = C._rng(generator)
    rows = [rng.choice(n, num_samples, replace=replacement, p=w / w.sum()) for w in weights]
    out = np.stack(rows).astype(np.int64)
    return C._make(out[0] if input.ndim == 1 else out, None, input.device)


def _traced_multinomial(input, num_samples: int, replacement: bool):  # noqa: A002
    probs = F.cast(input, dtypes.float32)
    probs = probs / F.sum(probs, dim=-1, keepdim=True)
    n = probs.shape[-1]
    if replacement:  # inverse CDF: count the CDF steps below each uniform draw
        lead = tuple(probs.shape[:-1])
        u = traced_uniform(lead + (num_samples, 1), dtypes.float32, input.device)
        cdf = F.unsqueeze(cumsum(probs, -1), -2)
        index = F.sum(F.cast(F.ge(u, cdf), dtypes.int64), dim=-1)
        return F.clamp(index, max=n - 1)
    # Gumbel top-k: the k largest of log(p) + Gumbel noise are a sample without replacement
    u = uniform_as(probs, 1e-20, 1.0)
    keys = F.log(probs) - F.log(-F.log(u))
    return topk(keys, num_samples, -1)[1]
