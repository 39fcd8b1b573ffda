"""``nn.Unfold`` and ``nn.Fold``: sliding blocks to columns (im2col) and back."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn.module import Module


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, x):
        return nn_functional.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)


class Fold(Module):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, x):
        return nn_functional.fold(x, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)
