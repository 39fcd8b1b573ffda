"""Fake-quantize modules with moving-average min/max observers, as PyTorch's
``torch.ao.quantization.FakeQuantize`` with ``MovingAverageMinMaxObserver`` (activations,
per tensor, affine) or ``MovingAveragePerChannelMinMaxObserver`` (weights, per channel,
symmetric).

While the module trains (``training`` and ``observer_enabled``), each call first updates
the running range, ``min = min + c * (batch_min - min)`` (the first call takes the batch's),
then the scale and zero point from it (PyTorch's ``_calculate_qparams``), then rounds ``x``
with them (``flowserve.ops.fake_quant``). The range, scale and zero point are buffers, so
they are saved with the model and a compiled ``nn.Graph`` updates them as eager mode does.
``QConfig.freeze_observer_after`` stops the updates after that many observed calls, inside
the graph as well (the step count is a buffer too).

>>> import flowserve as flow
>>> from flowserve.ao.quantization import FakeQuantize, default_qconfig
>>> fq = FakeQuantize(default_qconfig().activation)
>>> y = fq(flow.tensor([-1.0, 0.0, 0.5, 3.0]))
>>> round(float(fq.scale[0]) * 255, 4), int(fq.zero_point[0])
(4.0, 64)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from flowserve import dtypes
from flowserve.autograd.grad_mode import no_grad
from flowserve.nn.module import Module
from flowserve.ops import creation
from flowserve.ops import functional as F
from flowserve.ops.fake_quant import fake_quant

FLOAT32_EPS = float(np.finfo(np.float32).eps)  # the smallest scale, as PyTorch's observers
# ONNX Runtime's range for int8 weights with ``reduce_range`` (what ``flowserve export
# --precision int8`` writes, see exporter/precision.py): 7 bits, symmetric.
WEIGHT_QUANT_RANGE = (-64, 64)
ACTIVATION_QUANT_RANGE = (0, 255)  # uint8 activations, ONNX Runtime's U8S8 kernels


@dataclass(frozen=True)
class FakeQuantSpec:
    """How one kind of tensor is fake-quantized: the integer range, per channel (along
    ``axis``) or per tensor, symmetric or affine, and the observer's averaging constant
    (1.0: the range of the latest call only)."""

    quant_min: int
    quant_max: int
    per_channel: bool = False
    symmetric: bool = False
    averaging_constant: float = 0.01
    axis: int = 0

    def __post_init__(self):
        if not self.quant_min <= 0 <= self.quant_max or self.quant_min >= self.quant_max:
            raise ValueError(f"FakeQuantSpec expected quant_min <= 0 <= quant_max and quant_min < quant_max, "
                             f"got ({self.quant_min}, {self.quant_max})")
        if not 0.0 < self.averaging_constant <= 1.0:
            raise ValueError(f"FakeQuantSpec expected an averaging_constant in (0, 1], got {self.averaging_constant}")


@dataclass(frozen=True)
class QConfig:
    """What ``prepare_qat`` inserts: the activation and weight specs, and after how many
    training calls the observers (``freeze_observer_after``) and the BatchNorm statistics
    of fused conv+BN modules (``freeze_bn_after``) stop moving (None: never)."""

    activation: FakeQuantSpec
    weight: FakeQuantSpec
    freeze_observer_after: Optional[int] = None
    freeze_bn_after: Optional[int] = None

    def __post_init__(self):
        for name in ("freeze_observer_after", "freeze_bn_after"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"QConfig.{name} expected None or an int >= 0, got {value!r}")


def default_qconfig(freeze_observer_after: Optional[int] = None,
                    freeze_bn_after: Optional[int] = None) -> QConfig:
    """What ``flowserve export --precision int8`` deploys: uint8 affine activations per tensor
    (moving average, constant 0.01, as PyTorch's default), int8 weights per output channel,
    symmetric, in ONNX Runtime's 7-bit range, observed on the current weights."""
    return QConfig(FakeQuantSpec(*ACTIVATION_QUANT_RANGE),
                   FakeQuantSpec(*WEIGHT_QUANT_RANGE, per_channel=True, symmetric=True, averaging_constant=1.0),
                   freeze_observer_after, freeze_bn_after)


class FakeQuantize(Module):
    """Observe (while training) and fake-quantize a tensor; ``channels`` is the size of
    dim ``spec.axis`` for a per-channel spec."""

    def __init__(self, spec: FakeQuantSpec, channels: Optional[int] = None,
                 freeze_observer_after: Optional[int] = None):
        super().__init__()
        if spec.per_channel and (not isinstance(channels, int) or channels < 1):
            raise ValueError(f"FakeQuantize per channel expected the channel count, got {channels!r}")
        self.spec = spec
        self.freeze_observer_after = freeze_observer_after
        self.observer_enabled = True
        self.fake_quant_enabled = True
        size = channels if spec.per_channel else 1
        self.register_buffer("scale", creation.ones(size))
        self.register_buffer("zero_point", creation.zeros(size))
        self.register_buffer("min_val", creation.zeros(size))
        self.register_buffer("max_val", creation.zeros(size))
        self.register_buffer("observed", creation.zeros(()))  # calls observed so far

    def forward(self, x):
        scale, zero_point = self.scale, self.zero_point
        if self.training and self.observer_enabled:
            scale, zero_point = self._observe(x)
        if not self.fake_quant_enabled:
            return x
        return fake_quant(x, F.cast(scale, x.dtype), F.cast(zero_point, x.dtype), quant_min=self.spec.quant_min,
                          quant_max=self.spec.quant_max, axis=self.spec.axis if self.spec.per_channel else None)

    def _observe(self, x):
        spec = self.spec
        with no_grad():
            x = F.cast(x, dtypes.float32)
            if spec.per_channel:
                axes = [d for d in range(x.ndim) if d != spec.axis % x.ndim]
                low, high = F.amin(x, axes), F.amax(x, axes)
            else:
                low, high = F.reshape(F.amin(x), [1]), F.reshape(F.amax(x), [1])
            first = F.eq(self.observed, 0.0)
            low = F.where(first, low, self.min_val + (low - self.min_val) * spec.averaging_constant)
            high = F.where(first, high, self.max_val + (high - self.max_val) * spec.averaging_constant)
            step = F.scalar_tensor(1.0, dtypes.float32, x.device)
            if self.freeze_observer_after is not None:
                active = F.lt(self.observed, float(self.freeze_observer_after))
                low, high = F.where(active, low, self.min_val), F.where(active, high, self.max_val)
                step = F.cast(active, dtypes.float32)
            scale, zero_point = quantization_params(low, high, spec)
            if self.freeze_observer_after is not None:
                scale, zero_point = F.where(active, scale, self.scale), F.where(active, zero_point, self.zero_point)
            self.min_val.copy_(low)
            self.max_val.copy_(high)
            self.scale.copy_(scale)
            self.zero_point.copy_(zero_point)
            self.observed.copy_(self.observed + step)
        return scale, zero_point

    def extra_repr(self) -> str:
        s = self.spec
        kind = f"per channel (dim {s.axis})" if s.per_channel else "per tensor"
        return (f"quant_min={s.quant_min}, quant_max={s.quant_max}, {kind}, "
                f"{'symmetric' if s.symmetric else 'affine'}, averaging_constant={s.averaging_constant}")


def quantization_params(low, high, spec: FakeQuantSpec):
    """Scale and zero point of the range ``[low, high]`` (widened to hold 0), as PyTorch's
    observers compute them (float32, ``torch.finfo(float32).eps`` as the smallest scale)."""
    zero = F.scalar_tensor(0.0, low.dtype, low.device)
    low, high = F.minimum(low, zero), F.maximum(high, zero)
    if spec.symmetric:
        high = F.maximum(-low, high)
        scale = F.maximum(high / (float(spec.quant_max - spec.quant_min) / 2), FLOAT32_EPS)
        middle = 0 if spec.quant_min < 0 else (spec.quant_min + spec.quant_max + 1) // 2
        return scale, scale * 0.0 + float(middle)
    scale = F.maximum((high - low) / float(spec.quant_max - spec.quant_min), FLOAT32_EPS)
    zero_point = F.clamp(float(spec.quant_min) - F.round(low / scale), spec.quant_min, spec.quant_max)
    return scale, zero_point
