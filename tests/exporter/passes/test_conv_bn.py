import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from tests.exporter.passes.common import exported_ops, passes_of, traced


def _conv_bn(act):
    flow.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), act)
    with flow.no_grad():  # non-trivial running statistics
        model[1].running_mean.copy_(flow.randn(8))
        model[1].running_var.copy_(flow.rand(8) + 0.5)
    return model


@pytest.mark.parametrize("act,name", [(nn.ReLU(), "relu"), (nn.ReLU6(), "clip:0:6")])
def test_conv_bn_act_is_one_conv(act, name):
    g = passes_of(traced(_conv_bn(act), 2, 3, 6, 6))
    (node,) = g.ir.nodes
    assert node.op == "fused.Conv" and node.attrs["act"] == name
    assert g.groups[0].detail == f"bias, batchnorm folded, {name}"
    assert node.inputs[1] == "model.0.weight:folded" and g.consts[node.inputs[2]].shape == (8,)


@pytest.mark.parametrize("target,op", [("portable", "flowserve.Conv_k3x3_s1x1_p1_1_1_1_d1x1_g1_clip_0_6"),
                                       ("onnxruntime", "com.microsoft.FusedConv")])
def test_conv_targets(target, op):
    assert exported_ops(traced(_conv_bn(nn.ReLU6()), 2, 3, 6, 6), target) == {op: 1}


def test_depthwise_conv_without_bn():
    model = nn.Sequential(nn.Conv2d(4, 4, 3, groups=4, bias=False), nn.ReLU())
    g = passes_of(traced(model, 2, 4, 5, 5))
    (node,) = g.ir.nodes
    assert node.attrs["groups"] == 4 and len(node.inputs) == 2 and node.inputs[1] == "model.0.weight"
    assert np.array_equal(g.consts["model.0.weight"], model[0].weight.numpy())


class _Residual(nn.Module):
    """ResNet's block tail: ``act(bn(conv(x)) + x)``."""

    def __init__(self, act):
        super().__init__()
        self.conv, self.bn, self.act = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), act
        with flow.no_grad():
            self.bn.running_mean.copy_(flow.randn(4))
            self.bn.running_var.copy_(flow.rand(4) + 0.5)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)) + x)


@pytest.mark.parametrize("act,name", [(nn.ReLU(), "relu"), (nn.ReLU6(), "clip:0:6")])
def test_residual_add_and_activation_join_the_conv(act, name):
    flow.manual_seed(0)
    g = passes_of(traced(_Residual(act), 2, 4, 5, 5))
    (node,) = g.ir.nodes
    assert node.attrs["residual"] is True and node.attrs["act"] == name
    assert node.inputs[3] == g.ir.inputs[0].name and g.consts[node.inputs[2]].shape == (4,)
    assert g.groups[0].detail == f"bias, batchnorm folded, residual add, {name}"


@pytest.mark.parametrize("target,op", [("portable", "flowserve.Conv_k3x3_s1x1_p1_1_1_1_d1x1_g1_add_relu"),
                                       ("onnxruntime", "com.microsoft.FusedConv")])
def test_residual_conv_targets(target, op):
    flow.manual_seed(0)
    assert exported_ops(traced(_Residual(nn.ReLU()), 2, 4, 5, 5), target) == {op: 1}


def test_residual_without_activation_or_of_another_shape_stays_an_add():
    class Broadcast(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 1, bias=False)

        def forward(self, x):
            return flow.relu(self.conv(x) + x[:, :1])

    flow.manual_seed(0)
    linear = passes_of(traced(_Residual(nn.Identity()), 2, 4, 5, 5))
    assert [n.op for n in linear.ir.nodes] == ["fused.Conv", "add"]
    assert linear.ir.nodes[0].attrs["residual"] is False
    broadcast = passes_of(traced(Broadcast(), 2, 4, 5, 5))
    assert "add" in [n.op for n in broadcast.ir.nodes]
