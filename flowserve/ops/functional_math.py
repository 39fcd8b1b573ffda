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
from flowserve.ops import basic as F
from flowserve.ops import einsum as einsum_impl
from flowserve.ops import elementwise as E
from flowserve.ops import math as M
from flowserve.ops.functional_index import max_with_indices, min_with_indices
from flowserve.ops.registry import fail_dtype, fail_shape
from flowserve.tensor import Tensor


def _float(x):
    return F._floatify(F.as_tensor(x))


# -- smooth unary ----------------------------------------------------------------------------


def sin(x):
    """Elementwise sine: ``flow.sin(flow.zeros(2))`` is ``[0., 0.]``."""
    return M.sin(_float(x))


def cos(x):
    return M.cos(_float(x))


def tan(x):
    x = _float(x)
    return M.sin(x) / M.cos(x)


def erf(x):
    """The Gauss error function, as ``torch.erf``."""
    return M.erf(_float(x))


def erfc(x):
    return 1.0 - erf(x)


def expm1(x):
    return M.expm1(_float(x))


def log1p(x):
    return M.log1p(_float(x))


def log2(x):
    return F.log(x) * (1.0 / _math.log(2.0))


def log10(x):
    return F.log(x) * (1.0 / _math.log(10.0))


def exp2(x):
    return F.exp(_float(x) * _math.log(2.0))


def reciprocal(x):
    return F.div(1.0, x)


# -- rounding and remainders -----------------------------------------------------------------


def floor(x):
    x = F.as_tensor(x)
    return M.floor(x) if x.dtype.is_floating_point else x


def ceil(x):
    x = F.as_tensor(x)
    return M.ceil(x) if x.dtype.is_floating_point else x


def round(x, decimals: int = 0):  # noqa: A001 - the public name is flow.round
    """Round half to even, as ``torch.round`` (``decimals`` scales by 10**decimals)."""
    x = F.as_tensor(x)
    if not x.dtype.is_floating_point:
        return x
    if decimals == 0:
        return M.round_(x)
    scale = 10.0 ** decimals
    return M.round_(x * scale) / scale


def trunc(x):
    x = F.as_tensor(x)
    if not x.dtype.is_floating_point:
        return x
    return E.where(F.lt(x, 0), M.ceil(x), M.floor(x))


fix = trunc


def frac(x):
    return x - trunc(x)


def _numeric_operands(op: str, a, b):
    a, b = F.coerce(a, b)
    if a.dtype is dtypes.bool_:
        fail_dtype(op, "numeric tensors", a.dtype)
    return a, b


def fmod(a, b):
    """C-style remainder: the result has the sign of ``a`` (``torch.fmod``)."""
    return M.fmod(*_numeric_operands("fmod", a, b))


def remainder(a, b):
    """Python-style remainder: the result has the sign of ``b`` (``torch.remainder``)."""
    a, b = _numeric_operands("remainder", a, b)
    r = M.fmod(a, b)
    zero = F.scalar_tensor(0, r.dtype, r.device)
    signs_differ = M.bitwise_xor(E.lt(r, zero), E.lt(b, zero))
    fix_up = M.bitwise_and(E.ne(r, zero), signs_differ)
    return E.where(fix_up, r + b, r)


def floor_divide(a, b):
    """``a // b`` rounded toward minus infinity (``torch.floor_divide``); zero gradient."""
    a, b = _numeric_operands("floor_divide", a, b)
    exact = E.div(E.sub(a, remainder(a, b)), b)
    return M.round_(exact) if exact.dtype.is_floating_point else exact


def rounded_div(a, b, rounding_mode: str):
    """``torch.div`` with ``rounding_mode`` "trunc" or "floor"."""
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode != "trunc":
        raise ValueError(f"div expected rounding_mode None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = _numeric_operands("div", a, b)
    if a.dtype.is_floating_point:
        return trunc(E.div(a, b))
    return E.div(E.sub(a, M.fmod(a, b)), b)


# -- float classification ------------------------------------------------------------------------


def isnan(x):
    x = F.as_tensor(x)
    return E.ne(x, x) if x.dtype.is_floating_point else F.ne(x, x)


def isinf(x):
    x = F.as_tensor(x)
    if not x.dtype.is_floating_point:
        return F.ne(x, x)
    return E.eq(E.abs_(x), F.scalar_tensor(float("inf"), x.dtype, x.device))


def isfinite(x):
    x = F.as_tensor(x)
    if not x.dtype.is_floating_point:
        return F.eq(x, x)
    return E.eq(E.sub(x, x), F.scalar_tensor(0, x.dtype, x.device))


# -- logical and bitwise ----------------------------------------------------------------------------


def _as_bool(x):
    return F.cast(F.as_tensor(x), dtypes.bool_)


def logical_and(a, b):
    return M.bitwise_and(_as_bool(a), _as_bool(b))


def logical_or(a, b):
    return M.bitwise_or(_as_bool(a), _as_bool(b))


def logical_xor(a, b):
    return M.bitwise_xor(_as_bool(a), _as_bool(b))


def bitwise_and(a, b):
    return M.bitwise_and(*F.coerce(a, b))


def bitwise_or(a, b):
    return M.bitwise_or(*F.coerce(a, b))


def bitwise_xor(a, b):
    return M.bitwise_xor(*F.coerce(a, b))


def bitwise_not(x):
    return M.bitwise_not(F.as_tensor(x))


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
    x = F._floatify(x)
    axes = F._axes(x, dim, "var")
    count = _math.prod(x.shape[a] for a in axes)
    centered = x - F.mean(x, axes, keepdim=True)
    total = F.sum(centered * centered, axes, keepdim=keepdim)
    return F.div(total, float(count - _correction("var", unbiased, correction)))


def std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return F.sqrt(var(x, dim, unbiased, keepdim, correction=correction))


def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(x, dim, unbiased, keepdim, correction=correction), F.mean(F._floatify(x), dim, keepdim)


def std_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return std(x, dim, unbiased, keepdim, correction=correction), F.mean(F._floatify(x), dim, keepdim)


def prod(x, dim=None, keepdim=False, dtype=None):
    """Product of entries (integers and bools accumulate in int64, as PyTorch)."""
    x = F.cast(x, dtype) if dtype is not None else F._accumulate_dtype(x)
    return M.prod(x, axes=F._axes(x, dim, "prod"), keepdims=bool(keepdim))


def logsumexp(x, dim, keepdim=False):
    """``log(sum(exp(x)))`` over ``dim``, computed without overflow."""
    x = F._floatify(x)
    axes = F._axes(x, dim, "logsumexp")
    top = F.amax(x, axes, keepdim=True).detach()
    top = E.where(isinf(top), F.scalar_tensor(0, x.dtype, x.device), top)
    out = F.log(F.sum(F.exp(x - top), axes, keepdim=True)) + top
    return out if keepdim else F.squeeze(out, axes) if axes else out


def _safe_sqrt(s):
    """sqrt whose gradient at 0 is 0 (as PyTorch's norm), not inf * 0 = nan."""
    is_zero = E.eq(s, F.scalar_tensor(0, s.dtype, s.device))
    one = F.scalar_tensor(1, s.dtype, s.device)
    return E.where(is_zero, F.scalar_tensor(0, s.dtype, s.device), F.sqrt(E.where(is_zero, one, s)))


def norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector norms over ``dim`` (all entries by default): p = 2/"fro", 1, inf, -inf, 0
    or any other number, as ``torch.norm``."""
    x = F._floatify(F.cast(x, dtype) if dtype is not None else x)
    if p == "fro" or p == 2:
        return _safe_sqrt(F.sum(x * x, dim, keepdim))
    if isinstance(p, str):
        raise ValueError(f"norm expected p in 'fro', or a number, got {p!r}")
    magnitude = F.abs(x)
    if p == float("inf"):
        return F.amax(magnitude, dim, keepdim)
    if p == float("-inf"):
        return F.amin(magnitude, dim, keepdim)
    if p == 0:
        return F.sum(F.cast(F.ne(x, 0), x.dtype), dim, keepdim)
    if p == 1:
        return F.sum(magnitude, dim, keepdim)
    return F.pow(F.sum(F.pow(magnitude, float(p)), dim, keepdim), 1.0 / float(p))


# -- reductions named like builtins (exported as flow.max, flow.min, flow.any, flow.all) ---------


def max_(input, dim=None, keepdim=False):  # noqa: A002 - PyTorch's argument names
    """``flow.max(x)``, ``flow.max(x, dim)`` (values and indices) or ``flow.max(x, other)``."""
    if dim is None:
        return F.amax(input)
    if hasattr(dim, "_dtype"):
        return F.maximum(input, dim)
    return max_with_indices(input, dim, keepdim)


def min_(input, dim=None, keepdim=False):  # noqa: A002
    if dim is None:
        return F.amin(input)
    if hasattr(dim, "_dtype"):
        return F.minimum(input, dim)
    return min_with_indices(input, dim, keepdim)


def any_(input, dim=None, keepdim=False):  # noqa: A002
    """Whether any entry (along ``dim``) is non-zero."""
    hits = F.sum(F.cast(F.ne(input, 0), dtypes.int64), dim, keepdim)
    return F.gt(hits, 0)


def all_(input, dim=None, keepdim=False):  # noqa: A002
    """Whether every entry (along ``dim``) is non-zero."""
    misses = F.sum(F.cast(F.eq(input, 0), dtypes.int64), dim, keepdim)
    return F.eq(misses, 0)


# -- products of matrices ----------------------------------------------------------------------------


def bmm(a, b):
    """Batched matrix product of (B, N, K) and (B, K, M) tensors."""
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        fail_shape("bmm", "(B, N, K) and (B, K, M) inputs", f"{tuple(a.shape)} and {tuple(b.shape)}")
    return F.matmul(a, b)


def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        fail_shape("dot", "two 1-d tensors", f"{tuple(a.shape)} and {tuple(b.shape)}")
    return F.matmul(a, b)


def outer(a, b):
    return F.unsqueeze(a, -1) * F.unsqueeze(b, 0)


def einsum(equation: str, *operands):
    """Einstein summation over permute/reshape/matmul/sum: ``flow.einsum("bij,bjk->bik", a, b)``.

    Handles any number of operands (contracted pairwise, left to right), implicit output,
    ``...``, and indices summed within one operand; a repeated index inside one operand
    (a diagonal, such as ``"ii->i"``) raises an error.
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return einsum_impl.einsum(equation, [F.as_tensor(x) for x in operands])


# -- whole-tensor comparisons ------------------------------------------------------------------------


def isclose(a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
    a, b = F.coerce(a, b)
    a, b = F._floatify(a), F._floatify(b)
    close = F.le(F.abs(a - b), atol + rtol * F.abs(b))
    close = logical_or(close, E.eq(a, b))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def allclose(a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    """Whether every entry of ``a`` is close to ``b`` (``|a - b| <= atol + rtol * |b|``)."""
    return bool(F.logical_not(isclose(a, b, rtol, atol, equal_nan)).sum().item() == 0)


def equal(a, b) -> bool:
    """Whether ``a`` and ``b`` have the same size and entries."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    return bool(F.ne(a, b).sum().item() == 0)


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def numel(input) -> int:  # noqa: A002
    return input.numel()


def div(a, b, rounding_mode=None):
    """``flow.div(a, b)``; ``rounding_mode`` "trunc" or "floor" rounds the quotient."""
    return F.div(a, b) if rounding_mode is None else rounded_div(a, b, rounding_mode)


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
