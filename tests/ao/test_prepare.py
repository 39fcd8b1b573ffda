"""``prepare_qat``'s per-module ``qconfig``: a module whose ``qconfig`` is None stays float."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import flowserve.nn as nn
from flowserve.ao import quantization as Q
from flowserve.nn.qat import modules as qat
from tests.ao.qat_models import TinyNet, images


def _float_islands(model: TinyNet) -> TinyNet:
    model.stem.qconfig = None
    model.head.qconfig = None
    return model


def test_a_module_whose_qconfig_is_none_stays_float():
    prepared = Q.prepare_qat(_float_islands(TinyNet()))
    assert [type(m) for m in prepared.stem] == [nn.Conv2d, nn.BatchNorm2d, nn.ReLU6]
    assert type(prepared.head) is nn.Linear
    assert not any(isinstance(m, Q.FakeQuantize) for m in prepared.stem.modules())
    assert type(prepared.block.conv[0]) is qat.ConvBn2d and type(prepared.block.conv[3]) is qat.ConvBn2d
    prepared(images())
    # the block reads the float stem's output: its first layer quantizes its input itself
    assert float(prepared.block.conv[0].input_fake_quant.observed) == 1.0


def test_a_child_may_set_its_own_qconfig_inside_a_float_module():
    model = TinyNet()
    model.block.qconfig = None
    model.block.conv[3].qconfig = Q.default_qconfig()
    prepared = Q.prepare_qat(model)
    assert type(prepared.block.conv[0]) is nn.Conv2d  # float: not fused either
    assert type(prepared.block.conv[3]) is qat.Conv2d  # its BatchNorm inherits None: not fused
    assert not hasattr(prepared.block, "activation_post_process")
    assert type(prepared.head) is qat.Linear


def test_float_islands_compute_the_float_layers():
    model = _float_islands(TinyNet())
    prepared = Q.prepare_qat(model)
    prepared(images(seed=5))  # observe the ranges
    prepared.eval()
    model.stem.load_state_dict(prepared.stem.state_dict())  # the stem's BatchNorm statistics moved
    model.eval()
    x = images()
    np.testing.assert_array_equal(prepared.stem(x).numpy(), model.stem(x).numpy())
    features = nn.functional.adaptive_avg_pool2d(prepared.block(prepared.stem(x)), 1).flatten(1)
    # the float head's output is the model's: not quantized again by the model around it
    np.testing.assert_allclose(prepared(x).numpy(), model.head(features).numpy(), rtol=1e-6, atol=1e-6)
    assert not np.allclose(prepared.block(prepared.stem(x)).numpy(), model.block(model.stem(x)).numpy(), atol=1e-6)


def test_a_qconfig_that_is_not_one_is_refused():
    model = TinyNet()
    model.head.qconfig = "int8"
    with pytest.raises(TypeError, match=r"Linear\.qconfig to be a QConfig or None, got str"):
        Q.prepare_qat(model)


def test_the_argument_applies_where_no_module_sets_one():
    model = _float_islands(TinyNet())
    frozen = Q.default_qconfig(freeze_observer_after=3)
    prepared = Q.prepare_qat(copy.deepcopy(model), frozen)
    assert {m.freeze_observer_after for m in prepared.modules() if isinstance(m, Q.FakeQuantize)} == {3}


def test_batchnorm_frozen_from_the_first_step_trains_what_is_deployed():
    """``freeze_bn_after=0``: a training call computes the folded convolution the eval
    model (and the int8 export) computes, and leaves the running statistics alone."""
    model = TinyNet()
    model(images(seed=6))  # float32 training: running statistics of data
    prepared = Q.prepare_qat(model, Q.default_qconfig(freeze_bn_after=0))
    stats = {k: v.numpy().copy() for k, v in prepared.state_dict().items() if "running" in k}
    x = images(seed=7)
    trained = prepared(x).numpy()
    assert all(np.array_equal(v, prepared.state_dict()[k].numpy()) for k, v in stats.items())
    deployed = Q.convert(prepared)(x).numpy()
    np.testing.assert_allclose(trained, deployed, rtol=1e-5, atol=1e-5)
    unfrozen = Q.prepare_qat(model)
    assert not np.allclose(unfrozen(x).numpy(), trained, rtol=1e-3, atol=1e-3)


class InplaceReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.relu, self.conv2 = nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Conv2d(4, 4, 3)

    def forward(self, x):
        return self.conv2(self.relu(self.conv1(x)))


def test_a_quantized_tensor_updated_in_place_is_quantized_again():
    """``ReLU(inplace=True)`` on a layer's quantized output makes another value (a node of its
    own in the export): the next layer quantizes its input, as it does after ``inplace=False``."""
    prepared = Q.prepare_qat(InplaceReLU())
    prepared(images())
    assert float(prepared.conv2.input_fake_quant.observed) == 1.0
