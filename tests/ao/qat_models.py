"""A small conv net with what QAT has to handle in MobileNetV2: conv + BN + ReLU6 fused,
a depthwise conv, a projection conv + BN without activation, a residual sum, pooling and a
linear head."""

from __future__ import annotations

import numpy as np

import flowserve as flow
import flowserve.nn as nn


class Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False), nn.BatchNorm2d(channels),
            nn.ReLU6(), nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x):
        return x + self.conv(x)


class TinyNet(nn.Module):
    def __init__(self, classes: int = 5, seed: int = 0):
        super().__init__()
        flow.manual_seed(seed)
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU6())
        self.block = Residual(8)
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        x = self.block(self.stem(x))
        return self.head(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def images(batch: int = 8, size: int = 12, seed: int = 3):
    rng = np.random.default_rng(seed)
    return flow.tensor(rng.standard_normal((batch, 3, size, size)).astype(np.float32))


def labels(batch: int = 8, classes: int = 5, seed: int = 4):
    return flow.tensor(np.random.default_rng(seed).integers(0, classes, batch).astype(np.int64))
