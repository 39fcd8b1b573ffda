import pytest

import flowserve.nn as nn
from tests.exporter.passes.common import exported_ops, kinds, passes_of, traced


@pytest.mark.parametrize("module,kind,detail", [(nn.GELU(), "Gelu", "none"), (nn.GELU(approximate="tanh"), "Gelu", "tanh"),
                                                (nn.SiLU(), "SiLU", "")])
def test_composite_activations_are_recognised(module, kind, detail):
    g = passes_of(traced(module, 2, 5))
    (group,) = g.groups
    assert (group.kind, group.detail) == (kind, detail) and len(g.ir.nodes) == 1


def test_similar_but_different_function_is_left_alone():
    class NotGelu(nn.Module):
        def forward(self, x):
            return x * 0.5 * ((x * 0.8).tanh() + 1.0)

    assert kinds(traced(NotGelu(), 2, 5)) == []


@pytest.mark.parametrize("target,op", [("portable", "flowserve.GeluTanh"), ("onnxruntime", "com.microsoft.FastGelu")])
def test_gelu_targets(target, op):
    assert op in exported_ops(traced(nn.GELU(approximate="tanh"), 2, 5), target)


def test_gelu_after_linear_is_absorbed():
    assert kinds(traced(nn.Sequential(nn.Linear(4, 8), nn.GELU()), 2, 4)) == ["Gelu", "Gemm"]
    ops = exported_ops(traced(nn.Sequential(nn.Linear(4, 8), nn.GELU()), 2, 4), "onnxruntime")
    assert "com.microsoft.BiasGelu" in ops
