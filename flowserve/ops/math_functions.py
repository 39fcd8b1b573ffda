"""Public math functions beyond the core arithmetic: trigonometry, rounding, remainders,
logical and bitwise ops, the statistics reductions (``var``, ``std``, ``prod``,
``logsumexp``, ``norm``), ``bmm``/``einsum`` and comparisons of whole tensors.

All are PyTorch-compatible in arguments, dtypes and gradients; most are composites over
primitives of ``flowserve.ops.math`` and the core families.

>>> import flowserve as flow
>>> flow.remainder(flow.tensor([-3, 3]), 2).tolist()
[1, 1]
"""

from __future__ import annotations

import math as _math

from flowserve import dtypes
from flowserve.ops import core_functions
from flowserve.ops import einsum as einsum_impl
from flowserve.ops import elementwise
from flowserve.ops import math as math_ops
from flowserve.ops.indexing_functions import max_with_indices, min_with_indices
from flowserve.ops.registry import fail_dtype, fail_shape
from flowserve.tensor import Tensor


def _float(x):
    return core_functions._floatify(core_functions.as_tensor(x))


# -- smooth unary ----------------------------------------------------------------------------


def sin(x):
    """Elementwise sine: ``flow.sin(flow.zeros(2))`` is ``[0., 0.]``."""
    return math_ops.sin(_float(x))


def cos(x):
    return math_ops.cos(_float(x))


def tan(x):
    x = _float(x)
    return math_ops.sin(x) / math_ops.cos(x)


def erf(x):
    """The Gauss error function, as ``torch.erf``."""
    return math_ops.erf(_float(x))


def erfc(x):
    return 1.0 - erf(x)


def expm1(x):
    return math_ops.expm1(_float(x))


def log1p(x):
    return math_ops.log1p(_float(x))


def log2(x):
    return core_functions.log(x) * (1.0 / _math.log(2.0))


def log10(x):
    return core_functions.log(x) * (1.0 / _math.log(10.0))


def exp2(x):
    return core_functions.exp(_float(x) * _math.log(2.0))


def reciprocal(x):
    return core_functions.div(1.0, x)


# -- rounding and remainders -----------------------------------------------------------------


def floor(x):
    x = core_functions.as_tensor(x)
    return math_ops.floor(x) if x.dtype.is_floating_point else x


def ceil(x):
    x = core_functions.as_tensor(x)
    return math_ops.ceil(x) if x.dtype.is_floating_point else x


def round(x, decimals: int = 0):  # noqa: A001 - the public name is flow.round
    """Round half to even, as ``torch.round`` (``decimals`` scales by 10**decimals)."""
    x = core_functions.as_tensor(x)
    if not x.dtype.is_floating_point:
        return x
    if decimals == 0:
        return math_ops.round_(x)
    scale = 10.0 ** decimals
    return math_ops.round_(x * scale) / scale


def trunc(x):
    x = core_functions.as_tensor(x)
    if not x.dtype.is_floating_point:
        return x
    return elementwise.where(core_functions.lt(x, 0), math_ops.ceil(x), math_ops.floor(x))


fix = trunc


def frac(x):
    return x - trunc(x)


def _numeric_operands(op: str, a, b):
    a, b = core_functions.coerce(a, b)
    if a.dtype is dtypes.bool_:
        fail_dtype(op, "numeric tensors", a.dtype)
    return a, b


def fmod(a, b):
    """C-style remainder: the result has the sign of ``a`` (``torch.fmod``)."""
    return math_ops.fmod(*_numeric_operands("fmod", a, b))


def remainder(a, b):
    """Python-style remainder: the result has the sign of ``b`` (``torch.remainder``)."""
    a, b = _numeric_operands("remainder", a, b)
    r = math_ops.fmod(a, b)
    zero = core_functions.scalar_tensor(0, r.dtype, r.device)
    signs_differ = math_ops.bitwise_xor(elementwise.lt(r, zero), elementwise.lt(b, zero))
    fix_up = math_ops.bitwise_and(elementwise.ne(r, zero), signs_differ)
    return elementwise.where(fix_up, r + b, r)


def floor_divide(a, b):
    """``a // b`` rounded toward minus infinity (``torch.floor_divide``); zero gradient."""
    a, b = _numeric_operands("floor_divide", a, b)
    exact = elementwise.div(elementwise.sub(a, remainder(a, b)), b)
    return math_ops.round_(exact) if exact.dtype.is_floating_point else exact


def rounded_div(a, b, rounding_mode: str):
    """``torch.div`` with ``rounding_mode`` "trunc" or "floor"."""
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode != "trunc":
        raise ValueError(f"div expected rounding_mode None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = _numeric_operands("div", a, b)
    if a.dtype.is_floating_point:
        return trunc(elementwise.div(a, b))
    return elementwise.div(elementwise.sub(a, math_ops.fmod(a, b)), b)


# -- float classification ------------------------------------------------------------------------


def isnan(x):
    x = core_functions.as_tensor(x)
    return elementwise.ne(x, x) if x.dtype.is_floating_point else core_functions.ne(x, x)


def isinf(x):
    x = core_functions.as_tensor(x)
    if not x.dtype.is_floating_point:
        return core_functions.ne(x, x)
    return elementwise.eq(elementwise.abs_(x), core_functions.scalar_tensor(float("inf"), x.dtype, x.device))


def isfinite(x):
    x = core_functions.as_tensor(x)
    if not x.dtype.is_floating_point:
        return core_functions.eq(x, x)
    return elementwise.eq(elementwise.sub(x, x), core_functions.scalar_tensor(0, x.dtype, x.device))


# -- logical and bitwise ----------------------------------------------------------------------------


def _as_bool(x):
    return core_functions.cast(core_functions.as_tensor(x), dtypes.bool_)


def logical_and(a, b):
    return math_ops.bitwise_and(_as_bool(a), _as_bool(b))


def logical_or(a, b):
    return math_ops.bitwise_or(_as_bool(a), _as_bool(b))


def logical_xor(a, b):
    return math_ops.bitwise_xor(_as_bool(a), _as_bool(b))


def bitwise_and(a, b):
    return math_ops.bitwise_and(*core_functions.coerce(a, b))


def bitwise_or(a, b):
    return math_ops.bitwise_or(*core_functions.coerce(a, b))


def bitwise_xor(a, b):
    return math_ops.bitwise_xor(*core_functions.coerce(a, b))


def bitwise_not(x):
    return math_ops.bitwise_not(core_functions.as_tensor(x))


# -- statistics ---------------------------------------------------------------------------------


def _correction(op: str, unbiased, correction) -> float:
    if correction is not None and unbiased is not None:
        raise TypeError(f"{op} takes either unbiased or correction, not both")
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


def var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance over ``dim`` with Bessel's ``correction`` (default 1, as ``torch.var``).

    >>> import flowserve as flow
    >>> flow.var(flow.tensor([1.0, 2.0, 3.0])).item()
    1.0
    """
    if isinstance(dim, bool):  # torch.var(x, False): the legacy ``unbiased`` position
        dim, unbiased = None, dim
    x = core_functions._floatify(x)
    axes = core_functions._axes(x, dim, "var")
    count = _math.prod(x.shape[a] for a in axes)
    centered = x - core_functions.mean(x, axes, keepdim=True)
    total = core_functions.sum(centered * centered, axes, keepdim=keepdim)
    return core_functions.div(total, float(count - _correction("var", unbiased, correction)))


def std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return core_functions.sqrt(var(x, dim, unbiased, keepdim, correction=correction))


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(x, dim, unbiased, keepdim, correction=correction), core_functions.mean(
        core_functions._floatify(x), dim, keepdim
    )


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return std(x, dim, unbiased, keepdim, correction=correction), core_functions.mean(
        core_functions._floatify(x), dim, keepdim
    )


def prod(x, dim=None, keepdim=False, dtype=None):
    """Product of entries (integers and bools accumulate in int64, as PyTorch)."""
    x = core_functions.cast(x, dtype) if dtype is not None else core_functions._accumulate_dtype(x)
    return math_ops.prod(x, axes=core_functions._axes(x, dim, "prod"), keepdims=bool(keepdim))


def logsumexp(x, dim, keepdim=False):
    """``log(sum(exp(x)))`` over ``dim``, computed without overflow."""
    x = core_functions._floatify(x)
    axes = core_functions._axes(x, dim, "logsumexp")
    top = core_functions.amax(x, axes, keepdim=True).detach()
    top = elementwise.where(isinf(top), core_functions.scalar_tensor(0, x.dtype, x.device), top)
    out = core_functions.log(core_functions.sum(core_functions.exp(x - top), axes, keepdim=True)) + top
    return out if keepdim else core_functions.squeeze(out, axes) if axes else out


def _safe_sqrt(s):
    """sqrt whose gradient at 0 is 0 (as PyTorch's norm), not inf * 0 = nan."""
    is_zero = elementwise.eq(s, core_functions.scalar_tensor(0, s.dtype, s.device))
    one = core_functions.scalar_tensor(1, s.dtype, s.device)
    return elementwise.where(
        is_zero,
        core_functions.scalar_tensor(0, s.dtype, s.device),
        core_functions.sqrt(elementwise.where(is_zero, one, s)),
    )


def norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector norms over ``dim`` (all entries by default): p = 2/"fro", 1, inf, -inf, 0
    or any other number, as ``torch.norm``."""
    x = core_functions._floatify(core_functions.cast(x, dtype) if dtype is not None else x)
    if p == "fro" or p == 2:
        return _safe_sqrt(core_functions.sum(x * x, dim, keepdim))
    if isinstance(p, str):
        raise ValueError(f"norm expected p in 'fro', or a number, got {p!r}")
    magnitude = core_functions.abs(x)
    if p == float("inf"):
        return core_functions.amax(magnitude, dim, keepdim)
    if p == float("-inf"):
        return core_functions.amin(magnitude, dim, keepdim)
    if p == 0:
        return core_functions.sum(core_functions.cast(core_functions.ne(x, 0), x.dtype), dim, keepdim)
    if p == 1:
        return core_functions.sum(magnitude, dim, keepdim)
    return core_functions.pow(core_functions.sum(core_functions.pow(magnitude, float(p)), dim, keepdim), 1.0 / float(p))


# -- reductions named like builtins (exported as flow.max, flow.min, flow.any, flow.all) ---------


def max_(input, dim=None, keepdim=False):  # noqa: A002 - PyTorch's argument names
    """``flow.max(x)``, ``flow.max(x, dim)`` (values and indices) or ``flow.max(x, other)``."""
    if dim is None:
        return core_functions.amax(input)
    if hasattr(dim, "_dtype"):
        return core_functions.maximum(input, dim)
    return max_with_indices(input, dim, keepdim)


def min_(input, dim=None, keepdim=False):  # noqa: A002
    if dim is None:
        return core_functions.amin(input)
    if hasattr(dim, "_dtype"):
        return core_functions.minimum(input, dim)
    return min_with_indices(input, dim, keepdim)


def any_(input, dim=None, keepdim=False):  # noqa: A002
    """Whether any entry (along ``dim``) is non-zero."""
    hits = core_functions.sum(core_functions.cast(core_functions.ne(input, 0), dtypes.int64), dim, keepdim)
    return core_functions.gt(hits, 0)


def all_(input, dim=None, keepdim=False):  # noqa: A002
    """Whether every entry (along ``dim``) is non-zero."""
    misses = core_functions.sum(core_functions.cast(core_functions.eq(input, 0), dtypes.int64), dim, keepdim)
    return core_functions.eq(misses, 0)


# -- products of matrices ----------------------------------------------------------------------------


def bmm(a, b):
    """Batched matrix product of (B, N, K) and (B, K, M) tensors."""
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        fail_shape("bmm", "(B, N, K) and (B, K, M) inputs", f"{tuple(a.shape)} and {tuple(b.shape)}")
    return core_functions.matmul(a, b)


def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        fail_shape("dot", "two 1-d tensors", f"{tuple(a.shape)} and {tuple(b.shape)}")
    return core_functions.matmul(a, b)


def outer(a, b):
    return core_functions.unsqueeze(a, -1) * core_functions.unsqueeze(b, 0)


def einsum(equation: str, *operands):
    """Einstein summation over permute/reshape/matmul/sum: ``flow.einsum("bij,bjk->bik", a, b)``.

    Handles any number of operands (contracted pairwise, left to right), implicit output,
    ``...``, and indices summed within one operand; a repeated index inside one operand
    (a diagonal, such as ``"ii->i"``) raises an error.
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return einsum_impl.einsum(equation, [core_functions.as_tensor(x) for x in operands])


# -- whole-tensor comparisons ------------------------------------------------------------------------


def isclose(a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
    a, b = core_functions.coerce(a, b)
    a, b = core_functions._floatify(a), core_functions._floatify(b)
    close = core_functions.le(core_functions.abs(a - b), atol + rtol * core_functions.abs(b))
    close = logical_or(close, elementwise.eq(a, b))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def allclose(a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    """Whether every entry of ``a`` is close to ``b`` (``|a - b| <= atol + rtol * |b|``)."""
    return bool(core_functions.logical_not(isclose(a, b, rtol, atol, equal_nan)).sum().item() == 0)


def equal(a, b) -> bool:
    """Whether ``a`` and ``b`` have the same size and entries."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    return bool(core_functions.ne(a, b).sum().item() == 0)


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def numel(input) -> int:  # noqa: A002
    return input.numel()


def div(a, b, rounding_mode=None):
    """``flow.div(a, b)``; ``rounding_mode`` "trunc" or "floor" rounds the quotient."""
    return core_functions.div(a, b) if rounding_mode is None else rounded_div(a, b, rounding_mode)


true_divide = div

# the public names (``flow.max``/``min``/``any``/``all`` are ``max_``/... under their builtin names)
__all__ = [
    "sin", "cos", "tan", "erf", "erfc", "expm1", "log1p", "log2", "log10", "exp2", "reciprocal",
    "floor", "ceil", "round", "trunc", "fix", "frac", "fmod", "remainder", "floor_divide", "div",
    "true_divide", "isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "var", "std", "var_mean",
    "std_mean", "prod", "logsumexp", "norm", "bmm", "dot", "outer", "einsum", "isclose",
    "allclose", "equal", "is_tensor", "numel",
]
