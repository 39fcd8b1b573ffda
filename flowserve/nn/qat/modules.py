"""The modules ``prepare_qat`` puts in place of float ones (PyTorch's ``torch.ao.nn.qat`` and
``torch.ao.nn.intrinsic.qat``): they share the float module's parameters and fake-quantize
its weight, its input (unless already fake-quantized by the module before) and its output.

``ConvBn2d`` trains the convolution with BatchNorm folded in, as the deployed model computes
it (PyTorch's ``ConvBn2d`` "approximate" form): the weight is scaled by
``gamma / sqrt(running_var + eps)`` before it is fake-quantized, the convolution is scaled
back, and BatchNorm then normalises with the batch statistics (or, once frozen, with the
running ones, which makes it the folded convolution). In eval mode it *is* the folded
convolution (weight ``w * gamma / std``, bias ``beta + (b - mean) * gamma / std``), the graph
``flow.save`` deploys and the int8 export runs.
"""

from __future__ import annotations

import weakref
from typing import Optional

from flowserve import dtypes
from flowserve.nn.qat.fake_quantize import FakeQuantize, QConfig
from flowserve.autograd.grad_mode import no_grad
from flowserve.nn import functional as NF
from flowserve.nn.module import Module
from flowserve.ops import functional as F
from flowserve.ops.batch_norm import batch_norm_train
from flowserve.tensor import Tensor


class QuantizedTensors:
    """The tensors that came out of a fake-quantize module during the current forward pass
    of one prepared model: a module reading one of them does not quantize it again (one
    quantization per tensor, as the exported QDQ model holds); and those that came out of a
    module left in float (``qconfig = None``), which the container around it leaves float.
    A tensor updated in place since (``nn.ReLU(inplace=True)``) is another value, as in the
    exported model, where the update is a node of its own: it is neither."""

    def __init__(self):
        self._refs: dict = {}

    def _record(self, t: Tensor, quantized: bool) -> Tensor:
        self._refs = {k: r for k, r in self._refs.items() if r[0]() is not None}
        self._refs[id(t)] = (weakref.ref(t), quantized, t._version, t._lazy)
        return t

    def mark(self, t: Tensor) -> Tensor:
        return self._record(t, True)

    def mark_float(self, t: Tensor) -> Tensor:
        return self._record(t, False)

    def _kind(self, t):
        """True (quantized), False (float) or None (not recorded, or updated in place since:
        its version moved in eager mode, its traced value in a graph)."""
        ref = self._refs.get(id(t))
        if ref is None or ref[0]() is not t or ref[2] != t._version or ref[3] is not t._lazy:
            return None
        return ref[1]

    def __contains__(self, t) -> bool:
        return self._kind(t) is True

    def is_float(self, t) -> bool:
        return self._kind(t) is False

    def __deepcopy__(self, memo) -> "QuantizedTensors":
        return QuantizedTensors()


class _QuantizedModule(Module):
    """Input, weight and output fake-quantizers of one conv/linear layer."""

    def _init_quantizers(self, qconfig: QConfig, channels: int, tracker: QuantizedTensors) -> None:
        self.qconfig = qconfig
        self.tracker = tracker
        after = qconfig.freeze_observer_after
        self.input_fake_quant = FakeQuantize(qconfig.activation, freeze_observer_after=after)
        self.weight_fake_quant = FakeQuantize(qconfig.weight, channels, freeze_observer_after=after)
        self.output_fake_quant = FakeQuantize(qconfig.activation, freeze_observer_after=after)

    def _quantized_input(self, x):
        return x if x in self.tracker else self.input_fake_quant(x)

    def _quantized_output(self, y):
        if self.act is not None:
            y = self.act(y)
        return self.tracker.mark(self.output_fake_quant(y))


class Conv2d(_QuantizedModule):
    """A ``Conv2d`` (with an optional activation after it) with fake-quantized weight,
    input and output."""

    def __init__(self, conv, qconfig: QConfig, tracker: QuantizedTensors, act: Optional[Module] = None):
        super().__init__()
        if conv.padding_mode != "zeros":
            raise ValueError(f"prepare_qat expected Conv2d with padding_mode 'zeros', got {conv.padding_mode!r}")
        self.stride, self.padding, self.dilation, self.groups = conv.stride, conv.padding, conv.dilation, conv.groups
        self.weight, self.bias = conv.weight, conv.bias
        self.act = act
        self._init_quantizers(qconfig, conv.out_channels, tracker)

    def forward(self, x):
        w = self.weight_fake_quant(self.weight)
        y = NF.conv2d(self._quantized_input(x), w, self.bias, self.stride, self.padding, self.dilation, self.groups)
        return self._quantized_output(y)


class Linear(_QuantizedModule):
    """A ``Linear`` (with an optional activation after it) with fake-quantized weight,
    input and output."""

    def __init__(self, linear, qconfig: QConfig, tracker: QuantizedTensors, act: Optional[Module] = None):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.act = act
        self._init_quantizers(qconfig, linear.out_features, tracker)

    def forward(self, x):
        return self._quantized_output(NF.linear(self._quantized_input(x), self.weight_fake_quant(self.weight),
                                                self.bias))


class ConvBn2d(_QuantizedModule):
    """``Conv2d`` + ``BatchNorm2d`` (+ activation) trained with BatchNorm folded into the
    weight that is fake-quantized (see the module docstring)."""

    def __init__(self, conv, bn, qconfig: QConfig, tracker: QuantizedTensors, act: Optional[Module] = None):
        super().__init__()
        if conv.padding_mode != "zeros":
            raise ValueError(f"prepare_qat expected Conv2d with padding_mode 'zeros', got {conv.padding_mode!r}")
        if not bn.affine or not bn.track_running_stats or bn.momentum is None:
            raise ValueError("prepare_qat folds BatchNorm2d with affine=True, track_running_stats=True and a "
                             f"float momentum, got {bn.extra_repr()}")
        self.conv, self.bn, self.act = conv, bn, act
        self.bn_frozen = False
        self._init_quantizers(qconfig, conv.out_channels, tracker)

    def _scale_factor(self):
        bn = self.bn
        return bn.weight / F.sqrt(bn.running_var + bn.eps)

    def folded(self):
        """The weight and bias of the folded convolution."""
        bn, factor = self.bn, self._scale_factor()
        weight = self.conv.weight * F.reshape(factor, [-1, 1, 1, 1])
        shift = -bn.running_mean if self.conv.bias is None else self.conv.bias - bn.running_mean
        return weight, bn.bias + shift * factor

    def forward(self, x):
        x, conv = self._quantized_input(x), self.conv
        if not self.training:
            weight, bias = self.folded()
            y = NF.conv2d(x, self.weight_fake_quant(weight), bias, conv.stride, conv.padding, conv.dilation,
                          conv.groups)
            return self._quantized_output(y)
        factor = self._scale_factor()
        weight = self.weight_fake_quant(conv.weight * F.reshape(factor, [-1, 1, 1, 1]))
        z = NF.conv2d(x, weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        z = z / F.reshape(factor, [1, -1, 1, 1])
        if conv.bias is not None:
            z = z + F.reshape(conv.bias, [1, -1, 1, 1])
        return self._quantized_output(self._batch_norm(z))

    def _running_norm(self, z):
        bn, channel = self.bn, [1, -1, 1, 1]
        return (z - F.reshape(bn.running_mean, channel)) * F.reshape(self._scale_factor(), channel) \
            + F.reshape(bn.bias, channel)

    def _batch_norm(self, z):
        """Training-mode BatchNorm, or the running statistics' once frozen (by
        ``freeze_bn_stats`` or after ``qconfig.freeze_bn_after`` calls, counted by the
        BatchNorm's ``num_batches_tracked``, inside a compiled graph as well)."""
        if self.bn_frozen:
            return self._running_norm(z)
        bn, after = self.bn, self.qconfig.freeze_bn_after
        y, mean, var = batch_norm_train(z, bn.weight, bn.bias, eps=float(bn.eps))
        n = z.numel() // z.shape[1]
        with no_grad():
            new_mean = bn.running_mean * (1 - bn.momentum) + mean.detach() * bn.momentum
            new_var = bn.running_var * (1 - bn.momentum) + var.detach() * (n / (n - 1) * bn.momentum)
            if after is not None:
                frozen = F.ge(F.cast(bn.num_batches_tracked, dtypes.float32), float(after))
                new_mean = F.where(frozen, bn.running_mean, new_mean)
                new_var = F.where(frozen, bn.running_var, new_var)
            bn.running_mean.copy_(new_mean)
            bn.running_var.copy_(new_var)
            bn.num_batches_tracked.add_(1)
        # frozen, the statistics did not move: the running form reads what it read before
        return y if after is None else F.where(frozen, self._running_norm(z), y)
