import pytest

import flowserve as flow
import flowserve.nn as nn
from tests.exporter.passes.common import exported_ops, kinds, passes_of, traced


@pytest.mark.parametrize("eps,affine", [(1e-5, True), (1e-3, False)])
def test_layer_norm_is_recognised_with_its_eps(eps, affine):
    norm = nn.LayerNorm(6, eps=eps, elementwise_affine=affine)
    if affine:  # trained values (a weight of ones and a bias of zeros count as none)
        norm.weight.data = flow.linspace(0.5, 1.5, 6)
        norm.bias.data = flow.linspace(-0.1, 0.1, 6)
    g = passes_of(traced(norm, 2, 3, 6))
    (node,) = g.ir.nodes
    assert node.op == "fused.LayerNorm" and node.attrs["epsilon"] == pytest.approx(eps)
    assert node.attrs["has_weight"] is affine and node.attrs["has_bias"] is affine


def test_hand_written_layer_norm_is_recognised():
    class Hand(nn.Module):
        def forward(self, x):
            centered = x - x.mean(-1, keepdim=True)
            return centered / ((centered * centered).mean(-1, keepdim=True) + 1e-6).sqrt()

    g = passes_of(traced(Hand(), 2, 3, 6))
    (node,) = g.ir.nodes
    assert node.op == "fused.LayerNorm" and node.attrs["epsilon"] == pytest.approx(1e-6)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(x + self.fc(x))


def test_residual_add_joins_the_layer_norm():
    g = passes_of(traced(Residual(), 2, 3, 6))
    assert [n.op for n in g.ir.nodes] == ["fused.MatMulBias", "fused.LayerNorm"] and g.ir.nodes[1].attrs["skip"]
    assert "com.microsoft.SkipLayerNormalization" in exported_ops(traced(Residual(), 2, 3, 6), "onnxruntime")


def test_plain_normalisation_without_mean_is_not_layer_norm():
    class RMS(nn.Module):
        def forward(self, x):
            return x / (x * x).mean(-1, keepdim=True).sqrt()

    assert kinds(traced(RMS(), 2, 6)) == []
