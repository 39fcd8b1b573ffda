import numpy as np

import flowserve as flow
import flowserve.nn as nn
from tests.exporter.passes.common import passes_of, traced


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(flow.ones(4))
        self.s = nn.Parameter(flow.ones(4) * 3)

    def forward(self, x):
        return x * (self.w.exp() * self.s + 1.0) + self.w.reshape(1, 4).expand(5, 4).sum(0)


def test_constant_subgraphs_fold_but_expand_does_not_grow_the_model():
    g = passes_of(traced(Scaled(), 5, 4))
    assert [n.op for n in g.ir.nodes] == ["mul", "expand", "sum", "add"]
    (c,) = [i for i in g.ir.nodes[0].inputs if g.is_const(i)]
    np.testing.assert_allclose(g.consts[c], np.exp(1.0) * 3 + 1.0, rtol=1e-6)
    assert g.folded == 4  # exp, mul, add, reshape
