"""Random numbers that stay random inside ``nn.Graph``.

Eagerly, every random function draws from flowserve's default generator (``flow.manual_seed``)
or the ``generator`` given. Inside ``nn.Graph.build`` they record one of two primitives,
``uniform_like`` and ``normal_like`` (ONNX ``RandomUniformLike``/``RandomNormalLike``), so
a compiled graph draws fresh values on every call instead of freezing the trace's draw.
Each random node of a graph gets its own seed, derived from the graph's seed
(``GraphIR.attrs["random_seed"]``), which is drawn from flowserve's default generator when
the graph is traced: ``flow.manual_seed(s)`` before a graph's first call makes its
sequence of draws repeatable. Eager and graph draws are different numbers.

A random op given ``generator=`` inside ``build`` draws from that generator instead: the
graph takes one int64 seed per generator as a system input, drawn from the generator before
every call (``Generator.draw_seed``), and such ops record ``uniform_seeded``, a counter-based
hash of (seed, op's stream, element index) that ONNX Runtime computes with integer ops, so
``g.manual_seed(s)`` repeats a graph's draws exactly, whatever the default generator does.

``rand``, ``randn``, ``randint``, ``randperm``, the ``*_like`` forms, ``bernoulli``,
``multinomial`` and the in-place fills are composites of these two primitives in a graph.
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.ops import functional
from flowserve.ops.indexing_functions import argsort, cumsum, topk
from flowserve.ops.generator import default_generator, rng_of
from flowserve.ops.registry import Meta, current_trace, fail_dtype, fail_shape, primitive
from flowserve.tensor import from_array

RANDOM_PRIMITIVES = ("uniform_like", "normal_like", "dropout_mask", "uniform_seeded")

# uniform_seeded's hash: int64 arithmetic modulo the prime 2**31 - 1, every product below 2**62
HASH_PRIME = (1 << 31) - 1
HASH_SEED_MULT = 1103515245
HASH_STREAM_MULT = 12345679
HASH_ROUNDS = ((48271, 11, 13), (69621, 7919, 17), (16807, 104729, 11), (39373, 1299709, 16))
HASH_DROP_BITS = 7  # 31-bit hashes keep 24 bits: exact in float32, below 1


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
    return xp.asarray(default_generator.rng.uniform(low, high, x.shape)).astype(x.dtype)


@primitive("normal_like", shape=_float_like("normal_like"), differentiable=False)
def normal_like(xp, x, mean: float, std: float):
    return xp.asarray(default_generator.rng.normal(mean, std, x.shape)).astype(x.dtype)


def _seeded_meta(x: Meta, seed: Meta, stream: int) -> Meta:
    if not x.dtype.is_floating_point:
        fail_dtype("uniform_seeded", "a floating point tensor (its shape and dtype are used)", x.dtype)
    if seed.shape != () or seed.dtype is not dtypes.int64:
        fail_dtype("uniform_seeded", "a 0-d int64 seed", str(seed))
    return x


def seeded_hash(xp, count: int, seed, stream: int):
    """The 31-bit hashes of elements ``0..count-1`` of stream ``stream`` under ``seed`` (a
    0-d int64 array of ``xp``: it stays on the device, no host round trip)."""
    h = (xp.arange(count, dtype=np.int64) + (xp.asarray(seed, dtype=np.int64) % HASH_PRIME) * HASH_SEED_MULT
         + stream * HASH_STREAM_MULT) % HASH_PRIME
    for mult, add, shift in HASH_ROUNDS:
        h = (h * mult + add) % HASH_PRIME
        h = h ^ (h >> shift)
    return h


@primitive("uniform_seeded", shape=_seeded_meta, differentiable=False)
def uniform_seeded(xp, x, seed, stream: int):
    """Uniform draws in [0, 1) shaped like ``x``: a pure function of the seed, the stream
    and the element index (the same numbers in eager, ONNX Runtime and any session)."""
    h = seeded_hash(xp, int(np.prod(x.shape)), seed, stream) >> HASH_DROP_BITS
    return (h.astype(np.float64) * 2.0 ** (HASH_DROP_BITS - 31)).astype(x.dtype).reshape(x.shape)


# -- composites used while tracing ------------------------------------------------------------


def _base(size: tuple, dtype, device):
    """A tensor of shape ``size`` (batch dims kept symbolic) whose only use is its shape."""
    return functional.expand(functional.scalar_tensor(0, dtype, device), list(size))


def _float_base(like, dtype):
    dtype = dtypes.as_dtype(dtype) if dtype is not None else like.dtype
    base_dtype = dtype if dtype.is_floating_point else dtypes.float32
    return like if like.dtype is base_dtype else functional.cast(like, base_dtype), dtype


def _seeded(base, generator):
    """Uniform [0, 1) draws shaped like ``base`` from ``generator``'s per-call graph seed."""
    trace = current_trace()
    return uniform_seeded(base, trace.generator_seed(generator), stream=trace.next_random_stream())


def _uniform(base, low: float, high: float, generator):
    if generator is None:
        return uniform_like(base, low=float(low), high=float(high))
    u = _seeded(base, generator)
    return u if (low, high) == (0.0, 1.0) else u * float(high - low) + float(low)


def _normal(base, mean: float, std: float, generator):
    if generator is None:
        return normal_like(base, mean=float(mean), std=float(std))
    u1, u2 = _seeded(base, generator), _seeded(base, generator)  # Box-Muller; 1 - u1 is in (0, 1]
    z = functional.sqrt(functional.log(1.0 - u1) * -2.0) * functional.cos(u2 * (2.0 * np.pi))
    return z * float(std) + float(mean)


def traced_uniform(size: tuple, dtype, device, low: float = 0.0, high: float = 1.0, generator=None):
    return _uniform(_base(size, dtype, device), low, high, generator)


def traced_normal(size: tuple, dtype, device, mean: float = 0.0, std: float = 1.0, generator=None):
    base = _base(size, dtype, device)
    return _normal(base, mean, std, generator) if std != 0 else base + float(mean)


def uniform_as(like, low: float = 0.0, high: float = 1.0, dtype=None, generator=None):
    base, dtype = _float_base(like, dtype)
    return functional.cast(_uniform(base, low, high, generator), dtype)


def normal_as(like, mean: float = 0.0, std: float = 1.0, dtype=None, generator=None):
    base, dtype = _float_base(like, dtype)
    if std == 0:
        return functional.cast(
            functional.expand(functional.scalar_tensor(float(mean), base.dtype, base.device), list(base.shape)), dtype
        )
    return functional.cast(_normal(base, mean, std, generator), dtype)


def integers_from(uniform, low: int, high: int, dtype):
    """Integers in ``[low, high)`` from uniform draws in ``[low, high)``."""
    return functional.cast(
        functional.clamp(functional.floor(uniform), max=float(high - 1)), dtypes.as_dtype(dtype or dtypes.int64)
    )


def traced_randperm(n: int, dtype, device, generator=None):
    uniform = traced_uniform((n,), dtypes.float32, device, generator=generator)
    return functional.cast(argsort(uniform), dtypes.as_dtype(dtype or dtypes.int64))


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
    probs = input if p is None else functional.expand(functional.scalar_tensor(float(p), input.dtype, input.device),
                                             list(input.shape))
    if _tracing():
        return functional.cast(functional.lt(uniform_as(probs, generator=generator), probs), input.dtype)
    draws = rng_of(generator).random(tuple(input.shape))
    return from_array((draws < probs.numpy()).astype(input.dtype.np), None, input.device)


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
        return _traced_multinomial(input, num_samples, replacement, generator)
    weights = np.atleast_2d(input.numpy().astype(np.float64))
    if (weights < 0).any() or not np.isfinite(weights).all() or (weights.sum(-1) <= 0).any():
        raise RuntimeError("multinomial: probability tensor contains either inf, nan or element < 0, "
                           "or a row that sums to 0")
    rng = rng_of(generator)
    rows = [rng.choice(n, num_samples, replace=replacement, p=w / w.sum()) for w in weights]
    out = np.stack(rows).astype(np.int64)
    return from_array(out[0] if input.ndim == 1 else out, None, input.device)


def _traced_multinomial(input, num_samples: int, replacement: bool, generator):  # noqa: A002
    probs = functional.cast(input, dtypes.float32)
    probs = probs / functional.sum(probs, dim=-1, keepdim=True)
    n = probs.shape[-1]
    if replacement:  # inverse CDF: count the CDF steps below each uniform draw
        lead = tuple(probs.shape[:-1])
        u = traced_uniform(lead + (num_samples, 1), dtypes.float32, input.device, generator=generator)
        cdf = functional.unsqueeze(cumsum(probs, -1), -2)
        index = functional.sum(functional.cast(functional.ge(u, cdf), dtypes.int64), dim=-1)
        return functional.clamp(index, max=n - 1)
    # Gumbel top-k: the k largest of log(p) + Gumbel noise are a sample without replacement
    u = uniform_as(probs, 1e-20, 1.0, generator=generator)
    keys = functional.log(probs) - functional.log(-functional.log(u))
    return topk(keys, num_samples, -1)[1]
