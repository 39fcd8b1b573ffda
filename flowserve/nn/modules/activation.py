"""Activation modules. ``inplace=True`` writes the result into the input tensor, as PyTorch."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn.module import Module


def _maybe_inplace(x, out, inplace: bool):
    return x._assign(out) if inplace else out


class _Activation(Module):
    """An elementwise activation: subclasses define ``fn(x)``; ``inplace`` writes into ``x``."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return _maybe_inplace(x, self.fn(x), self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Activation):
    def fn(self, x):
        return nn_functional.relu(x)


class ReLU6(_Activation):
    """``min(max(x, 0), 6)``, as in MobileNetV2."""

    def fn(self, x):
        return nn_functional.relu6(x)


class Hardtanh(_Activation):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        self.min_val, self.max_val = min_val, max_val

    def fn(self, x):
        return nn_functional.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class LeakyReLU(_Activation):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__(inplace)
        self.negative_slope = negative_slope

    def fn(self, x):
        return nn_functional.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(_Activation):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        self.alpha = alpha

    def fn(self, x):
        return nn_functional.elu(x, self.alpha)


class SiLU(_Activation):
    def fn(self, x):
        return nn_functional.silu(x)


class Hardswish(_Activation):
    def fn(self, x):
        return nn_functional.hardswish(x)


class Hardsigmoid(_Activation):
    def fn(self, x):
        return nn_functional.hardsigmoid(x)


class Mish(_Activation):
    def fn(self, x):
        return nn_functional.mish(x)


class GELU(Module):
    """Gaussian error linear unit, exact (``approximate="none"``) or with tanh."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU expected approximate 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return nn_functional.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        return nn_functional.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class LogSigmoid(Module):
    def forward(self, x):
        return nn_functional.logsigmoid(x)


class Sigmoid(Module):
    def forward(self, x):
        return nn_functional.sigmoid(x)


class Tanh(Module):
    def forward(self, x):
        return nn_functional.tanh(x)


class Softmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return nn_functional.softmax(x, -1 if self.dim is None else self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return nn_functional.log_softmax(x, -1 if self.dim is None else self.dim)
