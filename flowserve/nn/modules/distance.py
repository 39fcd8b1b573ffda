"""``nn.CosineSimilarity`` and ``nn.PairwiseDistance``."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn.module import Module


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return nn_functional.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return nn_functional.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
