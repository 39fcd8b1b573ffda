"""Activations of ``flowserve.nn.functional`` beyond the primitive ones: PyTorch's ``inplace=``
forms (``relu(x, inplace=True)``) and ``relu_``-style twins, ``selu``, ``celu``, ``glu``,
``threshold``, ``softsign``, the shrinks, ``softmin`` and ``prelu``; all composites of the
registry's primitives (so they differentiate, trace into ``nn.Graph`` and export without rules
of their own).

>>> import flowserve as flow
>>> import flowserve.nn.functional as F
>>> F.softshrink(flow.tensor([-1.0, 0.2, 2.0])).tolist()
[-0.5, 0.0, 1.5]
"""

from __future__ import annotations

from flowserve.ops import activation as activation_ops
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops.registry import fail_shape

__all__ = [
    "relu", "relu6", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid",
    "silu", "mish", "threshold", "relu_", "elu_", "leaky_relu_", "hardtanh_", "softsign", "glu",
    "softshrink", "hardshrink", "tanhshrink", "softmin", "prelu", "selu_", "celu_", "threshold_", "rrelu",
    "rrelu_",
]


def maybe_inplace(x, out, inplace: bool):
    return x._assign(out) if inplace else out


def relu(input, inplace: bool = False):  # noqa: A002 - PyTorch's argument names
    return maybe_inplace(input, ops_functional.relu(input), inplace)


def relu6(input, inplace: bool = False):  # noqa: A002
    return maybe_inplace(input, activation_ops.relu6(input), inplace)


def elu(input, alpha: float = 1.0, inplace: bool = False):  # noqa: A002
    return maybe_inplace(input, activation_ops.elu(input, alpha), inplace)


def selu(input, inplace: bool = False):  # noqa: A002
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return maybe_inplace(input, activation_ops.elu(input, alpha) * scale, inplace)


def celu(input, alpha: float = 1.0, inplace: bool = False):  # noqa: A002
    out = ops_functional.where(
        ops_functional.gt(input, 0),
        input,
        (ops_functional.exp(ops_functional.minimum(input, 0.0) / alpha) - 1.0) * alpha,
    )
    return maybe_inplace(input, out, inplace)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):  # noqa: A002
    return maybe_inplace(input, activation_ops.leaky_relu(input, negative_slope), inplace)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):  # noqa: A002
    return maybe_inplace(input, activation_ops.hardtanh(input, min_val, max_val), inplace)


def hardswish(input, inplace: bool = False):  # noqa: A002
    return maybe_inplace(input, activation_ops.hardswish(input), inplace)


def hardsigmoid(input, inplace: bool = False):  # noqa: A002
    return maybe_inplace(input, activation_ops.hardsigmoid(input), inplace)


def silu(input, inplace: bool = False):  # noqa: A002
    return maybe_inplace(input, activation_ops.silu(input), inplace)


def mish(input, inplace: bool = False):  # noqa: A002
    return maybe_inplace(input, activation_ops.mish(input), inplace)


def threshold(input, threshold: float, value: float, inplace: bool = False):  # noqa: A002
    return maybe_inplace(input, ops_functional.where(ops_functional.gt(input, threshold), input, value), inplace)


def relu_(input):  # noqa: A002
    return relu(input, inplace=True)


def elu_(input, alpha: float = 1.0):  # noqa: A002
    return elu(input, alpha, inplace=True)


def leaky_relu_(input, negative_slope: float = 0.01):  # noqa: A002
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val: float = -1.0, max_val: float = 1.0):  # noqa: A002
    return hardtanh(input, min_val, max_val, inplace=True)


def softsign(input):  # noqa: A002
    return input / (ops_functional.abs(input) + 1)


def glu(input, dim: int = -1):  # noqa: A002
    if input.shape[dim] % 2:
        fail_shape("glu", f"an even size in dim {dim}", tuple(input.shape))
    dim = dim % input.ndim
    half = input.shape[dim] // 2
    return ops_functional.slice_axis(input, dim, 0, half) * ops_functional.sigmoid(
        ops_functional.slice_axis(input, dim, half, 2 * half)
    )


def softshrink(input, lambd: float = 0.5):  # noqa: A002
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, 0 between."""
    return ops_functional.where(
        input > lambd, input - lambd, ops_functional.where(input < -lambd, input + lambd, input * 0)
    )


def hardshrink(input, lambd: float = 0.5):  # noqa: A002
    """``x`` where ``|x| > lambd``, else 0."""
    return ops_functional.where(ops_functional.abs(input) > lambd, input, input * 0)


def tanhshrink(input):  # noqa: A002
    return input - ops_functional.tanh(input)


def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):  # noqa: A002
    x = ops_functional.cast(-input, dtype) if dtype is not None else -input
    return ops_functional.softmax(x, -1 if dim is None else dim)


def prelu(input, weight):  # noqa: A002
    """``x`` where positive, ``weight * x`` elsewhere; ``weight`` one slope or one per channel (dim 1)."""
    if weight.numel() > 1:
        weight = ops_functional.reshape(weight, (-1,) + (1,) * (input.ndim - 2))
    return ops_functional.where(ops_functional.gt(input, 0), input, input * weight)


def selu_(input):  # noqa: A002
    return selu(input, inplace=True)


def celu_(input, alpha: float = 1.0):  # noqa: A002
    return celu(input, alpha, inplace=True)


def threshold_(input, threshold_value: float, value: float):  # noqa: A002
    return threshold(input, threshold_value, value, inplace=True)


def rrelu(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,  # noqa: A002
          inplace: bool = False):
    """Randomized leaky ReLU (PyTorch's and OneFlow's): ``x`` where ``x > 0``, else ``a * x``. In
    training ``a`` is drawn from ``U(lower, upper)`` for each element (from the default
    generator, so ``flow.manual_seed`` and ``nn.Graph`` draw as eager mode does); in
    evaluation it is the fixed ``(lower + upper) / 2``."""
    if not 0 <= lower <= upper:
        raise ValueError(f"rrelu expects 0 <= lower <= upper, got lower={lower}, upper={upper}")
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    slope = creation.rand(*input.shape, dtype=input.dtype, device=input.device) * (upper - lower) + lower
    out = ops_functional.where(ops_functional.gt(input, 0), input, input * slope)
    return maybe_inplace(input, out, inplace)


def rrelu_(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False):  # noqa: A002
    return rrelu(input, lower, upper, training, inplace=True)
