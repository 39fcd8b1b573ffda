"""Padding layers: ``ZeroPad1d``/``2d``, ``ConstantPad1d``/``2d``, ``ReflectionPad1d``/``2d``,
``ReplicationPad1d``/``2d`` (PyTorch's constructor arguments), over ``flowserve.nn.functional.pad``."""

from __future__ import annotations

from flowserve.nn.module import Module
from flowserve.ops.padding import pad


class _Pad2d(Module):
    mode = "constant"

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding = tuple(padding) if isinstance(padding, (tuple, list)) else (int(padding),) * 4
        self.value = value

    def forward(self, x):
        return pad(x, list(self.padding), mode=self.mode, value=self.value)


class ZeroPad2d(_Pad2d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)


class ConstantPad2d(_Pad2d):
    pass


class ReflectionPad2d(_Pad2d):
    mode = "reflect"

    def __init__(self, padding):
        super().__init__(padding)


class ReplicationPad2d(_Pad2d):
    mode = "replicate"

    def __init__(self, padding):
        super().__init__(padding)


class _Pad1d(_Pad2d):
    def __init__(self, padding, value: float = 0.0):
        super().__init__(tuple(padding) if isinstance(padding, (tuple, list)) else (int(padding),) * 2, value)


class ZeroPad1d(_Pad1d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)


class ConstantPad1d(_Pad1d):
    pass


class ReflectionPad1d(_Pad1d):
    mode = "reflect"


class ReplicationPad1d(_Pad1d):
    mode = "replicate"
