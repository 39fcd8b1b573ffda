"""Fused float modules, as PyTorch's ``torch.ao.nn.intrinsic`` (public as
``flowserve.ao.nn.intrinsic``): ``nn.Sequential`` subclasses that hold the modules of one
fused sequence and compute what they computed one after the other.
``flowserve.ao.quantization.fuse_modules_qat`` makes them; ``prepare_qat`` turns the layers
inside them into its fused quantization-aware modules (a ``ConvBn2d`` trains the
convolution with BatchNorm folded in), as it does for an ``nn.Sequential``.

>>> import flowserve as flow
>>> from flowserve.nn import intrinsic
>>> fused = intrinsic.ConvBnReLU2d(flow.nn.Conv2d(3, 4, 3), flow.nn.BatchNorm2d(4), flow.nn.ReLU())
>>> fused(flow.randn(2, 3, 5, 5)).shape
flowserve.Size([2, 4, 3, 3])
"""

from __future__ import annotations

from flowserve.nn.modules.activation import ReLU
from flowserve.nn.modules.container import Sequential
from flowserve.nn.modules.conv import Conv2d
from flowserve.nn.modules.linear import Linear
from flowserve.nn.modules.normalization import BatchNorm2d


class _FusedModule(Sequential):
    """The modules of one fused sequence, of exactly the types in ``parts``."""

    parts: tuple = ()

    def __init__(self, *modules):
        given = tuple(type(m) for m in modules)
        if given != self.parts:
            raise TypeError(f"{type(self).__name__} expected modules ({_names(self.parts)}), "
                            f"got ({_names(given)})")
        super().__init__(*modules)


def _names(types) -> str:
    return ", ".join(t.__name__ for t in types)


class ConvReLU2d(_FusedModule):
    """``Conv2d`` then ``ReLU``."""

    parts = (Conv2d, ReLU)


class ConvBn2d(_FusedModule):
    """``Conv2d`` then ``BatchNorm2d``."""

    parts = (Conv2d, BatchNorm2d)


class ConvBnReLU2d(_FusedModule):
    """``Conv2d``, ``BatchNorm2d``, then ``ReLU``."""

    parts = (Conv2d, BatchNorm2d, ReLU)


class LinearReLU(_FusedModule):
    """``Linear`` then ``ReLU``."""

    parts = (Linear, ReLU)


class BNReLU2d(_FusedModule):
    """``BatchNorm2d`` then ``ReLU``."""

    parts = (BatchNorm2d, ReLU)
