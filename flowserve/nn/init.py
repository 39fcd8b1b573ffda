"""``flowserve.nn.init``: in-place initialisers with PyTorch's fan rules and names.

Inside ``nn.Graph.build`` (a module made there, a parameter re-initialised there) the
uniform and normal ones, and those built on them, draw afresh on every call of the graph,
as they do eagerly; ``trunc_normal_`` and ``orthogonal_`` would draw once, when the graph is
traced, and refuse instead.
"""

from __future__ import annotations

import math

import numpy as np

from flowserve.autograd.grad_mode import no_grad
from flowserve.device import to_device_array
from flowserve.dispatch import current_trace
from flowserve.errors import GraphError
from flowserve.ops.generator import rng_of as _rng
from flowserve.tensor import Tensor


def _fill(t, array) -> None:
    """Write ``array`` into ``t`` in place, as PyTorch's initialisers do: the tensors that
    share its value (``t.detach()``, ``t.data``) see it too."""
    with no_grad():
        t.copy_(Tensor._wrap(to_device_array(np.asarray(array, dtype=t.dtype.np), t.device), t.device))


def _fan(t) -> tuple[int, int]:
    if t.ndim < 2:
        raise ValueError(f"fan in and fan out can not be computed for a tensor with fewer than 2 dimensions, "
                         f"got size {tuple(t.shape)}")
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


_calculate_fan_in_and_fan_out = _fan  # PyTorch's (private, widely used) name: timm, flowvision


def _calculate_correct_fan(t, mode: str) -> int:
    return _fan_for(t, mode)


def calculate_gain(nonlinearity: str, param=None) -> float:
    gains = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "sigmoid": 1.0,
             "tanh": 5.0 / 3, "relu": math.sqrt(2.0), "selu": 3.0 / 4}
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity not in gains:
        raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")
    return gains[nonlinearity]


def _refuse_in_trace(name: str) -> None:
    if current_trace() is not None:
        raise GraphError(f"nn.init.{name} inside nn.Graph.build would draw once, when the graph is traced, where "
                         "eager mode draws on every call: initialise outside build(), or draw inside it with "
                         "flow.randn, flow.rand or Tensor.normal_/uniform_ (fresh on every call)")


def uniform_(t, a: float = 0.0, b: float = 1.0, generator=None):
    if current_trace() is not None:  # a random op of the graph: fresh on every call
        with no_grad():
            return t.uniform_(a, b, generator=generator)
    _fill(t, _rng(generator).uniform(a, b, tuple(t.shape)))
    return t


def normal_(t, mean: float = 0.0, std: float = 1.0, generator=None):
    if current_trace() is not None:
        with no_grad():
            return t.normal_(mean, std, generator=generator)
    _fill(t, _rng(generator).normal(mean, std, tuple(t.shape)))
    return t


def constant_(t, val: float):
    _fill(t, np.full(tuple(t.shape), val))
    return t


def zeros_(t):
    return constant_(t, 0.0)


def ones_(t):
    return constant_(t, 1.0)


def _fan_for(t, mode: str) -> int:
    fan_in, fan_out = _fan(t)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return fan_in if mode == "fan_in" else fan_out


def kaiming_uniform_(t, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None):
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(_fan_for(t, mode))
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(t, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None):
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan_for(t, mode))
    return normal_(t, 0.0, std, generator)


def xavier_uniform_(t, gain: float = 1.0, generator=None):
    fan_in, fan_out = _fan(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound, generator)


def xavier_normal_(t, gain: float = 1.0, generator=None):
    fan_in, fan_out = _fan(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def trunc_normal_(t, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0, generator=None):
    _refuse_in_trace("trunc_normal_")
    rng, out = _rng(generator), np.empty(tuple(t.shape))
    flat = out.reshape(-1)
    filled = 0
    while filled < flat.size:
        draw = rng.normal(mean, std, flat.size - filled)
        draw = draw[(draw >= a) & (draw <= b)]
        flat[filled:filled + draw.size] = draw
        filled += draw.size
    _fill(t, out)
    return t


def orthogonal_(t, gain: float = 1.0, generator=None):
    """Fill ``t`` (at least 2-d) with a (semi-)orthogonal matrix, as PyTorch: the QR of a
    normal draw, signs fixed by R's diagonal, times ``gain``."""
    if t.ndim < 2:
        raise ValueError(f"Only tensors with 2 or more dimensions are supported, got size {tuple(t.shape)}")
    _refuse_in_trace("orthogonal_")
    rows = t.shape[0]
    cols = t.numel() // rows
    flat = _rng(generator).normal(0.0, 1.0, (rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    _fill(t, gain * q.reshape(tuple(t.shape)))
    return t
