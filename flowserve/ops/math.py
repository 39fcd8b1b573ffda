"""Elementwise math primitives beyond the arithmetic core: trigonometry, erf, rounding,
``fmod``, ``expm1``/``log1p`` and bitwise ops. Public functions (``flow.sin``,
``flow.remainder``, ``flow.logical_and``...) are in ``flowserve.ops.math_functions``."""

from __future__ import annotations

import math as _math

import numpy as np

from flowserve.ops.elementwise import broadcast_meta, float_meta, where
from flowserve.ops.reduce import reduced_shape, sum_
from flowserve.ops.registry import Meta, fail_dtype, primitive


def _zero_grad(ctx, g):
    """Piecewise-constant functions: the gradient is zero almost everywhere (as PyTorch)."""
    x = ctx.inputs[0]
    return (g.new_zeros(()).expand(x.shape),)


# -- smooth unary ----------------------------------------------------------------------------

@primitive("sin", shape=float_meta("sin"), vjp=lambda ctx, g: (g * cos(ctx.inputs[0]),))
def sin(xp, x):
    return xp.sin(x)


@primitive("cos", shape=float_meta("cos"), vjp=lambda ctx, g: (-g * sin(ctx.inputs[0]),))
def cos(xp, x):
    return xp.cos(x)


def _erf_vjp(ctx, g):
    x = ctx.inputs[0]
    return (g * (2.0 / _math.sqrt(_math.pi)) * (-(x * x)).exp(),)


def _erf_array(xp, x):
    """erf with SciPy (or CuPy's) where installed, else Python's ``math.erf`` per element."""
    if xp is not np:
        from cupyx.scipy import special  # local: CuPy is optional

        return special.erf(x)
    try:
        from scipy import special  # local: SciPy is optional
    except ImportError:
        return np.asarray(np.frompyfunc(_math.erf, 1, 1)(x.astype(np.float64)), np.float64).astype(x.dtype)
    return special.erf(x)


@primitive("erf", shape=float_meta("erf"), vjp=_erf_vjp)
def erf(xp, x):
    wide = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    return _erf_array(xp, wide).astype(x.dtype, copy=False)


@primitive("expm1", shape=float_meta("expm1"), vjp=lambda ctx, g: (g * (ctx.outputs[0] + 1),))
def expm1(xp, x):
    return xp.expm1(x)


@primitive("log1p", shape=float_meta("log1p"), vjp=lambda ctx, g: (g / (ctx.inputs[0] + 1),))
def log1p(xp, x):
    return xp.log1p(x)


# -- rounding ----------------------------------------------------------------------------------

@primitive("floor", shape=float_meta("floor"), vjp=_zero_grad)
def floor(xp, x):
    return xp.floor(x)


@primitive("ceil", shape=float_meta("ceil"), vjp=_zero_grad)
def ceil(xp, x):
    return xp.ceil(x)


@primitive("round", shape=float_meta("round"), vjp=_zero_grad)
def round_(xp, x):
    return xp.round(x)  # half to even, as PyTorch and ONNX Round


def _fmod_vjp(ctx, g):
    a, b = ctx.inputs
    gb = None
    if ctx.needs(1):
        q = a / b
        gb = -g * where(q < 0, ceil(q), floor(q))
    return (g if ctx.needs(0) else None, gb)


@primitive("fmod", shape=broadcast_meta("fmod"), vjp=_fmod_vjp)
def fmod(xp, a, b):
    if a.dtype.kind in "iu":
        if xp.any(b == 0):
            raise ZeroDivisionError("fmod of integers by zero")
    return xp.fmod(a, b)


# -- bitwise (bool inputs: logical) ---------------------------------------------------------------

def _integral_meta(op: str, arity: int):
    binary = broadcast_meta(op)

    def rule(*xs: Meta) -> Meta:
        for x in xs:
            if x.dtype.is_floating_point:
                fail_dtype(op, "integer or bool tensors", x.dtype)
        return binary(*xs) if arity == 2 else xs[0]

    return rule


@primitive("bitwise_and", shape=_integral_meta("bitwise_and", 2), differentiable=False)
def bitwise_and(xp, a, b):
    return a & b


@primitive("bitwise_or", shape=_integral_meta("bitwise_or", 2), differentiable=False)
def bitwise_or(xp, a, b):
    return a | b


@primitive("bitwise_xor", shape=_integral_meta("bitwise_xor", 2), differentiable=False)
def bitwise_xor(xp, a, b):
    return a ^ b


@primitive("bitwise_not", shape=_integral_meta("bitwise_not", 1), differentiable=False)
def bitwise_not(xp, x):
    return ~x



# -- products ------------------------------------------------------------------------------------

def _prod_meta(x: Meta, axes: list, keepdims: bool) -> Meta:
    return Meta(reduced_shape(x.shape, axes, keepdims), x.dtype)


def _prod_vjp(ctx, g):
    """d prod / d x_i = prod of the other entries, exact also where entries are zero."""
    x, axes = ctx.inputs[0], ctx.attrs["axes"]
    kept = reduced_shape(x.shape, axes, True)
    g, out = g.reshape(kept), ctx.outputs[0].reshape(kept)
    is_zero = x == 0
    zero = x.new_zeros(())
    one = zero + 1
    nonzero_prod = prod(where(is_zero, one, x), axes=axes, keepdims=True)
    zeros_count = sum_(is_zero.to(x.dtype), axes=axes, keepdims=True)
    at_zero = where(zeros_count == 1, nonzero_prod, zero)
    return (g * where(is_zero, at_zero, out / where(is_zero, one, x)),)


@primitive("prod", shape=_prod_meta, vjp=_prod_vjp)
def prod(xp, x, axes: list, keepdims: bool):
    return xp.prod(x, axis=tuple(axes), keepdims=keepdims, dtype=x.dtype)
