"""A multi-layer perceptron: Linear + ReLU blocks and a linear head."""

from __future__ import annotations

from flowserve import nn


class MLP(nn.Module):
    """``flatten -> (Linear -> ReLU) per hidden size -> Linear``; layers live in ``layers``."""

    def __init__(self, in_features: int = 784, hidden=(512, 512), out_features: int = 10):
        super().__init__()
        blocks, width = [], in_features
        for h in hidden:
            blocks += [nn.Linear(width, h), nn.ReLU()]
            width = h
        blocks.append(nn.Linear(width, out_features))
        self.flatten = nn.Flatten()
        self.layers = nn.Sequential(*blocks)

    def forward(self, x):
        return self.layers(self.flatten(x))


def mlp(in_features: int = 784, hidden=(512, 512), out_features: int = 10) -> MLP:
    """The MLP of OneFlow's quickstart (784-512-512-10 by default).

    >>> import flowserve as flow
    >>> flow.models.mlp()(flow.randn(4, 1, 28, 28)).shape
    flowserve.Size([4, 10])
    """
    return MLP(in_features, hidden, out_features)
