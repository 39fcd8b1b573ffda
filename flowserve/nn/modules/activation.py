"""Activation modules. ``inplace=True`` writes the result into the input tensor, as PyTorch."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn.module import Module
from flowserve.nn.parameter import Parameter
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops.autocast_policy import lower_precision


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


class RReLU(_Activation):
    """Randomized leaky ReLU (PyTorch's and OneFlow's ``nn.RReLU``): ``x`` where ``x > 0``, else
    ``a * x``, with ``a`` drawn from ``U(lower, upper)`` for each element in training and the
    fixed ``(lower + upper) / 2`` in evaluation (``F.rrelu``).

    >>> import flowserve as flow
    >>> flow.nn.RReLU(0.25, 0.75).eval()(flow.tensor([-2.0, 2.0])).tolist()
    [-1.0, 2.0]
    """

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__(inplace)
        self.lower, self.upper = lower, upper

    def forward(self, x):
        return nn_functional.rrelu(x, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")


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


class PReLU(Module):
    """``max(0, x) + weight * min(0, x)`` with a learned slope (one, or one per channel)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(creation.full((num_parameters,), init, device=device, dtype=dtype or "float32"))

    def forward(self, x):
        return _prelu(x, self.weight)


@lower_precision  # under flow.autocast: in float16/bfloat16, as PyTorch's prelu
def _prelu(x, w):
    if w.shape[0] > 1:
        w = ops_functional.reshape(w, (-1,) + (1,) * (x.ndim - 2))
    return ops_functional.where(ops_functional.gt(x, 0), x, x * w)


def _activation(name: str, fn, *arg_names):
    def __init__(self, *args, inplace: bool = False, **kwargs):
        Module.__init__(self)
        values = dict(zip(arg_names, args), **kwargs)
        for key in arg_names:
            if key in values:
                setattr(self, key, values[key])
        self.inplace = inplace

    def forward(self, x):
        extra = [getattr(self, key) for key in arg_names if hasattr(self, key)]
        return fn(x, *extra, inplace=self.inplace) if "inplace" in fn.__code__.co_varnames else fn(x, *extra)

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__module__": __name__})


SELU = _activation("SELU", nn_functional.selu)


CELU = _activation("CELU", nn_functional.celu, "alpha")


Threshold = _activation("Threshold", nn_functional.threshold, "threshold", "value")


Softsign = _activation("Softsign", nn_functional.softsign)


class GLU(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return nn_functional.glu(x, self.dim)


class Softmax2d(Module):
    def forward(self, x):
        return nn_functional.softmax(x, dim=-3)


class FunctionalLayer(Module):
    """A layer that applies ``_fn(x, **self._args)``."""

    _fn = None

    def __init__(self, **args):
        super().__init__()
        self._args = args
        self.__dict__.update(args)

    def forward(self, x):
        return type(self)._fn(x, **self._args)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self._args.items())


class Softshrink(FunctionalLayer):
    _fn = staticmethod(nn_functional.softshrink)

    def __init__(self, lambd: float = 0.5):
        super().__init__(lambd=lambd)


class Hardshrink(FunctionalLayer):
    _fn = staticmethod(nn_functional.hardshrink)

    def __init__(self, lambd: float = 0.5):
        super().__init__(lambd=lambd)


class Tanhshrink(FunctionalLayer):
    _fn = staticmethod(nn_functional.tanhshrink)


class Softmin(FunctionalLayer):
    _fn = staticmethod(nn_functional.softmin)

    def __init__(self, dim=None):
        super().__init__(dim=dim)
