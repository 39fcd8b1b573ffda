import pytest

import flowserve.nn as nn
from tests.exporter.passes.common import exported_ops, kinds, passes_of, traced


def test_linear_relu_becomes_one_gemm_keeping_weight_names():
    g = passes_of(traced(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), 3, 4))
    (node,) = g.ir.nodes
    assert node.op == "fused.Gemm" and node.inputs == [g.ir.inputs[0].name, "model.0.weight", "model.0.bias"]
    assert node.attrs == {"trans_b": 1, "act": "relu"}


def test_3d_input_becomes_matmul_bias():
    assert kinds(traced(nn.Sequential(nn.Linear(4, 8), nn.Tanh()), 2, 3, 4)) == ["MatMulBias"]


def test_shared_intermediate_is_not_fused():
    class TwoUses(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            h = self.fc(x)
            return h.relu() + h

    assert kinds(traced(TwoUses(), 2, 4)) == ["Gemm"]  # bias absorbed, relu not (h is used twice)


@pytest.mark.parametrize("target,op", [("portable", "flowserve.Gemm_tB_sigmoid"), ("onnxruntime", "com.microsoft.FusedGemm")])
def test_targets(target, op):
    assert op in exported_ops(traced(nn.Sequential(nn.Linear(4, 8), nn.Sigmoid()), 3, 4), target)
