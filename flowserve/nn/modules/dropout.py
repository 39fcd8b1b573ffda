"""Dropout (active in training mode only)."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn.module import Module


class Dropout(Module):
    """Zero elements with probability ``p`` in training mode, scaling the rest by ``1/(1-p)``.

    Eagerly the masks come from ``flow.manual_seed``'s generator; in a compiled nn.Graph
    from ONNX Runtime's, so eager and graph training runs drop different elements.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return nn_functional.dropout(x, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class _ChannelDropout(Dropout):
    """Dropout of whole channels: ``Dropout``'s arguments, one draw per (sample, channel)."""

    _fn = None

    def forward(self, x):
        return type(self)._fn(x, self.p, self.training, self.inplace)


class Dropout1d(_ChannelDropout):
    """Zero whole channels of ``(N, C, L)`` with probability ``p`` (training only)."""

    _fn = staticmethod(nn_functional.dropout1d)


class Dropout2d(_ChannelDropout):
    """Zero whole channels of ``(N, C, H, W)`` with probability ``p`` (training only)."""

    _fn = staticmethod(nn_functional.dropout2d)


class Dropout3d(_ChannelDropout):
    _fn = staticmethod(nn_functional.dropout3d)
