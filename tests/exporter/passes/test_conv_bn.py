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
