"""``graph.config.enable_qat(True)`` trains as eager ``prepare_qat`` does."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import flowserve as flow
from flowserve.ao import quantization as Q
from flowserve.nn.qat.prepare import qconfig_from_graph_options
from tests.ao.qat_models import TinyNet, images, labels


class TrainGraph(flow.nn.Graph):
    def __init__(self, model, optimizer, qat_config: dict):
        super().__init__()
        self.model = model
        self.loss = flow.nn.CrossEntropyLoss()
        self.add_optimizer(optimizer)
        self.config.enable_qat(True)
        self.config.set_qat_config(**qat_config)

    def build(self, x, y):
        loss = self.loss(self.model(x), y)
        loss.backward()
        return loss


def _state(model) -> dict:
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def train_side_by_side(graph: TrainGraph, eager, batches, rtol: float) -> None:
    """One training call of ``graph`` and one eager step of ``eager`` (SGD, as the graph's)
    per batch; their losses agree to ``rtol``."""
    optimizer = flow.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    loss_fn = flow.nn.CrossEntropyLoss()
    for step, (x, y) in enumerate(batches):
        graph_loss = float(graph(x, y))
        optimizer.zero_grad()
        loss = loss_fn(eager(x), y)
        loss.backward()
        optimizer.step()
        np.testing.assert_allclose(graph_loss, float(loss), rtol=rtol, err_msg=f"loss, step {step}")


@pytest.mark.parametrize("qat_config,float_parts",
                         [({}, ()), ({"moving_min_max_stop_update_after_iters": 2, "freeze_bn_after": 1}, ()),
                          ({"freeze_bn_after": 0}, ("stem", "head"))],
                         ids=["default", "freezing", "frozen-bn-float-stem-and-head"])
def test_qat_graph_equals_eager_for_three_steps(qat_config, float_parts):
    float_model = TinyNet()
    for name in float_parts:  # left in float32 by prepare_qat
        getattr(float_model, name).qconfig = None
    graph_model = copy.deepcopy(float_model)
    graph = TrainGraph(graph_model, flow.optim.SGD(graph_model.parameters(), lr=0.05, momentum=0.9), qat_config)
    qconfig = qconfig_from_graph_options(graph.config.options)
    eager = Q.prepare_qat(float_model, qconfig)
    train_side_by_side(graph, eager, [(images(), labels())] * 3, rtol=1e-4)
    assert Q.is_prepared(graph_model)
    ours, theirs = _state(graph_model), _state(eager)
    assert sorted(ours) == sorted(theirs)
    assert any(k.endswith("output_fake_quant.scale") for k in ours) and any("activation_post_process" in k for k in ours)
    for name in float_parts:
        assert not any(k.startswith(f"{name}.") and "fake_quant" in k for k in ours), f"{name} is quantized"
    for name in ours:
        ref = theirs[name]
        np.testing.assert_allclose(ours[name], ref, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(ref).max())),
                                   err_msg=name)
