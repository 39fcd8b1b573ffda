"""``graph.config.set_execution_provider``: the engine that runs a compiled graph.

OpenVINO runs through ONNX Runtime's plugin where it lists a device, else through
OpenVINO's own runtime; both must give ONNX Runtime CPU's numbers (training losses within
1e-4 relative over three steps). The OpenVINO tests skip where neither is installed.
"""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.onnx_backend import openvino
from tests.graph.helpers import TrainGraph

needs_openvino = pytest.mark.skipif(not openvino.available(), reason='needs pip install "flowserve[openvino]"')
needs_runtime = pytest.mark.skipif(not openvino.runtime_available(), reason="needs the openvino package")


def _model():
    flow.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
                         nn.Conv2d(8, 8, 3, 2, 1, groups=8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16, 4))


def _data():
    rng = np.random.default_rng(0)
    return (flow.tensor(rng.standard_normal((4, 3, 8, 8)).astype(np.float32)),
            flow.tensor(rng.integers(0, 4, 4)))


class _Infer(nn.Graph):
    def __init__(self, model, provider):
        super().__init__()
        self.model = model
        self.config.set_execution_provider(provider)

    def build(self, x):
        return self.model(x)


def _train(provider):
    model = _model()
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), provider=provider)
    x, y = _data()
    losses = [float(graph(x, y).numpy()) for _ in range(3)]
    return losses, model, graph


def test_unknown_provider_is_refused():
    graph = _Infer(_model(), "cpu")
    with pytest.raises(ValueError, match="expected one of auto, cpu, cuda, openvino, got 'tpu'"):
        graph.config.set_execution_provider("tpu")


def test_a_provider_that_only_serves_is_refused_by_a_graph():
    graph = _Infer(_model(), "cpu")
    with pytest.raises(ValueError, match=r"'tensorrt' serves only \(flowserve serve --provider tensorrt\); "
                                         "a graph runs on one of auto, cpu, cuda, openvino"):
        graph.config.set_execution_provider("tensorrt")


def test_cpu_provider_trains_as_auto():
    assert _train("cpu")[0] == _train("auto")[0]


def _check_same_training():
    expected, reference, _ = _train("cpu")
    losses, model, graph = _train("openvino")
    np.testing.assert_allclose(losses, expected, rtol=1e-4)
    for (name, value), other in zip(model.state_dict().items(), reference.state_dict().values()):
        np.testing.assert_allclose(value.numpy(), other.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    return graph


@needs_openvino
def test_openvino_training_matches_cpu():
    graph = _check_same_training()
    assert "OpenVINO" in graph._compiled.session.get_providers()[0]


@needs_runtime
def test_openvino_runtime_route_training_matches_cpu(monkeypatch):
    monkeypatch.setattr(openvino, "plugin_devices", lambda: [])  # as where the plugin is absent
    graph = _check_same_training()
    assert isinstance(graph._compiled.session, openvino.OpenVINOSession)


@needs_runtime
def test_openvino_runtime_route_inference_and_run(monkeypatch):
    monkeypatch.setattr(openvino, "plugin_devices", lambda: [])
    model = _model().eval()
    x = _data()[0]
    graph = _Infer(model, "openvino")
    with flow.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(graph(x).numpy(), expected, rtol=1e-5, atol=1e-5)
    session = graph._compiled.session
    assert [i.name for i in session.get_inputs()] == [v.name for v in graph._compiled.traced.ir.inputs]
    out = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(flow.errors.GraphError, match="missing"):
        session.run(None, {})


def test_openvino_absent_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(openvino, "plugin_devices", lambda: [])
    monkeypatch.setattr(openvino, "runtime_available", lambda: False)
    with pytest.raises(flow.errors.GraphError, match=r"needs OpenVINO: pip install \"flowserve\[openvino\]\""):
        _Infer(_model().eval(), "openvino")(_data()[0])
