"""Convolution modules: Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d (PyTorch's
parameters, initialisation and ``repr``)."""

from __future__ import annotations

import math

from flowserve.nn import init
from flowserve.nn.volumetric_functions import conv3d
from flowserve.nn.module import Module
from flowserve.nn.parameter import Parameter
from flowserve.ops import conv as conv_ops
from flowserve.ops.autocast_policy import lower_precision
from flowserve.ops import creation
from flowserve.ops import padding as padding_ops
from flowserve.nn import functional as nn_functional
_conv_nd = lower_precision(conv_ops.conv_nd)  # under flow.autocast: in float16/bfloat16, as PyTorch
_conv_transpose_nd = lower_precision(conv_ops.conv_transpose_nd)


class _ConvNd(Module):
    _dims = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", output_padding=0,
                 device=None, dtype=None):
        super().__init__()
        name, r = type(self).__name__, self._dims
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name} expected in_channels and out_channels divisible by groups, "
                             f"got {in_channels}, {out_channels} and groups={groups}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"{name} expected padding_mode 'zeros', 'reflect', 'replicate' or 'circular', "
                             f"got {padding_mode!r}")
        if padding_mode != "zeros" and self._transposed:
            raise ValueError(f"Only 'zeros' padding mode is supported for {name}, got {padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = tuple(conv_ops.tuple_arg(kernel_size, r, "kernel_size", name))
        self.stride = tuple(conv_ops.tuple_arg(stride, r, "stride", name))
        self.dilation = tuple(conv_ops.tuple_arg(dilation, r, "dilation", name))
        self.padding = padding if isinstance(padding, str) else tuple(conv_ops.tuple_arg(padding, r, "padding", name))
        self.output_padding = tuple(conv_ops.tuple_arg(output_padding, r, "output_padding", name))
        self.padding_mode = padding_mode
        if self._transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = Parameter(creation.empty(*shape, device=device, dtype=dtype))
        self.bias = Parameter(creation.empty(out_channels, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def _conv_forward(self, x):
        r, name = self._dims, type(self).__name__
        padding = self.padding
        if self.padding_mode != "zeros":  # pad explicitly, then convolve without padding
            pads = conv_ops.conv_pads(padding, list(self.kernel_size), list(self.dilation), list(self.stride), r, name)
            order = [p for i in reversed(range(r)) for p in (pads[i], pads[r + i])]
            x, padding = padding_ops.pad(x, order, self.padding_mode), 0
        return _conv_nd(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups, r, name)

    def extra_repr(self) -> str:
        r = self._dims
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * r:
            s += f", padding={self.padding!r}" if isinstance(self.padding, str) else f", padding={self.padding}"
        if self.dilation != (1,) * r:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * r:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    """A convolution (no ``output_padding``: that belongs to the transposed ones)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device=device, dtype=dtype)

    def forward(self, x):
        return self._conv_forward(x)


class Conv1d(_Conv):
    """1-D convolution over (N, C, L): ``nn.Conv1d(16, 33, 3, stride=2)``."""

    _dims = 1


class Conv2d(_Conv):
    """2-D convolution over (N, C, H, W), as ``torch.nn.Conv2d``.

    >>> import flowserve as flow
    >>> conv = flow.nn.Conv2d(3, 8, 3, padding=1, groups=1, bias=False)
    >>> conv(flow.randn(2, 3, 32, 32)).shape
    flowserve.Size([2, 8, 32, 32])
    """


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 groups=1, bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__} expected padding as ints, got {padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device, dtype)

    def forward(self, x):
        return _conv_transpose_nd(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                   self.groups, self.dilation, self._dims, type(self).__name__)


class ConvTranspose1d(_ConvTransposeNd):
    _dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution (the gradient of Conv2d), as ``torch.nn.ConvTranspose2d``."""


class Conv3d(_ConvNd):
    """3-d convolution over (N, C, D, H, W), as ``torch.nn.Conv3d`` (a composite of 2-d
    convolutions over the kernel's depth taps: ``flowserve.nn.volumetric_functions``)."""

    _dims = 3

    def forward(self, x):
        name = type(self).__name__
        pads = conv_ops.conv_pads(self.padding, list(self.kernel_size), list(self.dilation), list(self.stride), 3, name)
        if any(pads):
            order = [p for i in reversed(range(3)) for p in (pads[i], pads[3 + i])]
            x = padding_ops.pad(x, order, "constant" if self.padding_mode == "zeros" else self.padding_mode)
        return conv3d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-d convolution over (N, C, D, H, W), as ``torch.nn.ConvTranspose3d``
    (weight (in, out/groups, kD, kH, kW))."""

    _dims = 3

    def forward(self, x):
        return nn_functional.conv_transpose3d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)
