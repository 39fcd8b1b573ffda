"""Special functions written as composites of the registry's primitives (no kernels or
lowerings of their own): ``erfinv``.

``erfinv`` starts from Giles' single-precision approximation ("Approximating the erfinv
function", GPU Computing Gems, 2011) and refines it with two Newton steps on ``erf``, so it
is accurate to the input dtype's rounding (float64 included), differentiable (the Newton
steps' derivative at the solution is ``1 / erf'(y)``) and exports to ONNX as ``Erf``,
``Log``, ``Sqrt`` and arithmetic.
"""

from __future__ import annotations

import math

from flowserve.ops import functional
from flowserve.ops import math_functions
_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
            -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
         -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _poly(coefficients, w):
    p = coefficients[0]
    for c in coefficients[1:]:
        p = p * w + c
    return p


def erfinv(input):  # noqa: A002 - PyTorch's argument name
    """The inverse error function on (-1, 1); ±inf at ±1, nan outside (``torch.erfinv``).

    >>> import flowserve as flow
    >>> round(float(flow.erfinv(flow.tensor(0.5))), 6)
    0.476936
    """
    x = input if input.dtype.is_floating_point else functional.cast(input, "float32")
    edge = 1 - (1e-15 if x.dtype.itemsize == 8 else 6e-8)
    inside = functional.clamp(x, -edge, edge)
    w = -functional.log((1 - inside) * (1 + inside))
    central = _poly(_CENTRAL, w - 2.5)
    tail = _poly(_TAIL, functional.sqrt(functional.clamp(w, min=5.0)) - 3.0)
    y = functional.where(w < 5.0, central, tail) * inside
    for _ in range(2):  # Newton on erf(y) = x: y -= (erf(y) - x) / erf'(y)
        y = y - (math_functions.erf(y) - inside) * (math.sqrt(math.pi) / 2) * functional.exp(y * y)
    fixed = x.detach()  # the edges and the outside carry no gradient
    y = functional.where(functional.abs(fixed) == 1, functional.where(fixed > 0, math.inf, -math.inf), y)
    return functional.where(functional.abs(fixed) > 1, math.nan, y)
