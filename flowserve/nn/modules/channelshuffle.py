"""``nn.ChannelShuffle``: interleave the channels of ``groups`` groups."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn.modules.activation import FunctionalLayer


class ChannelShuffle(FunctionalLayer):
    _fn = staticmethod(nn_functional.channel_shuffle)

    def __init__(self, groups: int):
        super().__init__(groups=groups)
