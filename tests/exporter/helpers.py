"""Small graphs for the exporter tests."""

from __future__ import annotations

import numpy as np

import flowserve as flow
import flowserve.nn as nn


class InferenceGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def called_graph(model, *shape, seed: int = 0):
    """An inference nn.Graph of ``model``, called once on random input of ``shape``."""
    flow.manual_seed(seed)
    graph = InferenceGraph(model)
    graph(flow.randn(*shape))
    return graph


def mlp(seed: int = 0):
    flow.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def assert_close(got, ref, rtol=1e-5):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * max(np.abs(ref).max(), 1e-30))
