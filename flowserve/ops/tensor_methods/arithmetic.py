"""``Tensor`` arithmetic: the operators (``+ - * / ** @ % //``, unary ``-``, ``abs``) and the
elementwise math methods (``x.exp()``, ``x.sin()``, ``x.addmm(...)``, ...).

Each method is the op function itself (``add = functional.add``), so ``a + b`` costs no call
beyond the op; the reflected operators swap their operands."""

from __future__ import annotations

from flowserve.ops import autocast_policy, core_functions, functional, special_functions


class ArithmeticMethods:
    """Operators and elementwise math (the op functions of ``flowserve.ops.functional``)."""

    __slots__ = ()

    __add__ = add = functional.add
    __sub__ = sub = subtract = functional.sub
    __mul__ = mul = multiply = functional.mul
    __truediv__ = core_functions.div  # true division (``div`` adds PyTorch's rounding_mode)
    div = divide = true_divide = functional.div
    __pow__ = pow = functional.pow  # noqa: A003 - PyTorch's method name
    __neg__ = neg = negative = functional.neg
    __abs__ = abs = absolute = functional.abs  # noqa: A003
    __mod__ = remainder = functional.remainder
    __floordiv__ = floor_divide = functional.floor_divide
    positive = functional.positive

    def __radd__(self, other):
        return functional.add(other, self)

    def __rsub__(self, other):
        return functional.sub(other, self)

    def __rmul__(self, other):
        return functional.mul(other, self)

    def __rtruediv__(self, other):
        return core_functions.div(other, self)

    def __rpow__(self, other):
        return functional.pow(other, self)

    def __rmod__(self, other):
        return functional.remainder(other, self)

    def __rfloordiv__(self, other):
        return functional.floor_divide(other, self)

    # matrix products follow flow.autocast's policy (float16/bfloat16 inside an autocast region)
    __matmul__ = matmul = mm = autocast_policy.matmul
    bmm = autocast_policy.bmm

    def __rmatmul__(self, other):
        return autocast_policy.matmul(other, self)

    dot, outer, mv, inner, vdot = functional.dot, functional.outer, functional.mv, functional.inner, functional.vdot
    addmm, baddbmm, addmv = functional.addmm, functional.baddbmm, functional.addmv

    exp, exp2, expm1 = functional.exp, functional.exp2, functional.expm1
    log, log1p, log2, log10 = functional.log, functional.log1p, functional.log2, functional.log10
    sqrt, rsqrt, square, reciprocal = functional.sqrt, functional.rsqrt, functional.square, functional.reciprocal
    sin, cos, tan, sinh, cosh = functional.sin, functional.cos, functional.tan, functional.sinh, functional.cosh
    tanh, sigmoid, relu, logit = functional.tanh, functional.sigmoid, functional.relu, functional.logit
    erf, erfc, erfinv = functional.erf, functional.erfc, special_functions.erfinv
    sign, fmod, hypot, xlogy = functional.sign, functional.fmod, functional.hypot, functional.xlogy
    floor, ceil, round, trunc, frac = (  # noqa: A003
        functional.floor, functional.ceil, functional.round, functional.trunc, functional.frac)
    deg2rad, rad2deg = functional.deg2rad, functional.rad2deg
    logaddexp, logaddexp2 = functional.logaddexp, functional.logaddexp2
    maximum, minimum = functional.maximum, functional.minimum
    clamp = clip = functional.clamp
    nan_to_num = functional.nan_to_num
    softmax, log_softmax = functional.softmax, functional.log_softmax

    def clamp_min(self, min):  # noqa: A002 - PyTorch's argument name
        return functional.clamp(self, min=min)

    def clamp_max(self, max):  # noqa: A002
        return functional.clamp(self, max=max)

    def addcmul(self, tensor1, tensor2, *, value=1):
        """``self + value * tensor1 * tensor2`` (PyTorch's order of operations)."""
        scaled = tensor1 * value if not isinstance(value, (int, float)) or value != 1 else tensor1
        return self + scaled * tensor2

    def addcdiv(self, tensor1, tensor2, *, value=1):
        """``self + value * tensor1 / tensor2`` (PyTorch's order of operations)."""
        return self + (tensor1 * value) / tensor2

    def lerp(self, end, weight):
        """``self + weight * (end - self)``, rounded as PyTorch's kernel (from ``end`` for a
        number weight of 0.5 or more)."""
        if isinstance(weight, (int, float)) and weight >= 0.5:
            return end - (end - self) * (1 - weight)
        return self + (end - self) * weight
