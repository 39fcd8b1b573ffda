"""Acceptance: reference models trained a few steps in graph mode, saved, reloaded by
``flow.load`` in a fresh process without the model code, exported for both targets and run
in ONNX Runtime at batch 1 and 7, all within tolerance of the eager module; portable
exports of the small models also run in ``onnx.reference``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx.reference
import pytest

import flowserve as flow
import flowserve.models
import flowserve.nn as nn
from flowserve.onnx_backend.providers import create_session
from tests.exporter.helpers import assert_close

BATCHES = (1, 7)


def _image(n, size=16):
    return np.random.default_rng(n).standard_normal((n, 3, size, size)).astype(np.float32)


MODELS = {  # name: (factory, input maker, classes, onnx.reference too)
    "mlp": (lambda: flow.models.mlp(20, (32, 32), 5), lambda n: np.random.default_rng(n).standard_normal(
        (n, 20)).astype(np.float32), 5, True),
    "resnet18": (lambda: flow.models.resnet18(num_classes=5), _image, 5, False),
    "mobilenet_v2": (lambda: flow.models.mobilenet_v2(num_classes=5, width_mult=0.35), lambda n: _image(n, 32), 5,
                     False),
    "transformer": (lambda: flow.models.transformer_classifier(vocab_size=30, num_classes=5, d_model=16, nhead=2,
                                                               num_layers=2, dim_feedforward=32, dropout=0.1),
                    lambda n: np.random.default_rng(n).integers(0, 30, (n, 6)), 5, True),
}


# MobileNetV2's depthwise stages normalise over few values per channel: larger steps leave
# weights whose float32 outputs differ between numpy and ONNX Runtime by ~2e-5 of their scale
LEARNING_RATES = {"mobilenet_v2": 1e-3}


class TrainGraph(nn.Graph):
    def __init__(self, model, lr: float = 0.01):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=lr, momentum=0.9))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def _train_and_save(name, directory):
    factory, make, classes, _ = MODELS[name]
    flow.manual_seed(0)
    model = factory()
    model.train()
    graph = TrainGraph(model, LEARNING_RATES.get(name, 0.01))
    x, y = flow.tensor(make(4)), flow.tensor(np.arange(4) % classes)
    losses = [graph(x, y).item() for _ in range(3)]
    assert np.isfinite(losses).all()
    flow.save(graph, directory)
    model.eval()
    return model


RELOAD = """
import sys, numpy as np, flowserve as flow
from flowserve.exporter import export
for d in sys.argv[1:]:
    graph = flow.load(d)
    assert 'flowserve.models' not in sys.modules
    np.save(d + '.reloaded.npy', graph(np.load(d + '.train_x.npy')).numpy())
    for target in ('portable', 'onnxruntime'):
        # export's own parity check guards lowering faults at serving's 1e-4: trained convnets
        # differ from the numpy interpreter by float32 rounding alone at ~2e-5 of the output
        # scale on some runs; the tests below hold the exports to 1e-5 against eager
        result = export(graph, d + '.' + target + '.onnx', target=target, rtol=1e-4)
        assert result.report.fused and result.report.nodes_after < result.report.nodes_before
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Train and save each model here; reload and export them in one fresh process."""
    root = tmp_path_factory.mktemp("models")
    out = {}
    for name in MODELS:
        directory = root / name
        model = _train_and_save(name, directory)
        train_x = MODELS[name][1](4)
        np.save(str(directory) + ".train_x.npy", train_x)
        inputs = {n: MODELS[name][1](n) for n in BATCHES + (4,)}
        with flow.no_grad():
            expected = {n: model(flow.tensor(v)).numpy() for n, v in inputs.items()}
        out[name] = (directory, inputs, expected)
    done = subprocess.run([sys.executable, "-c", RELOAD] + [str(d) for d, _, _ in out.values()],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_reloaded_in_fresh_process_matches_eager(trained, name):
    directory, _, expected = trained[name]
    assert_close(np.load(str(directory) + ".reloaded.npy"), expected[4])


@pytest.mark.parametrize("target", ["portable", "onnxruntime"])
@pytest.mark.parametrize("name", list(MODELS))
def test_exported_model_matches_eager(trained, name, target):
    directory, inputs, expected = trained[name]
    path = f"{directory}.{target}.onnx"
    session = create_session(path, device="cpu")
    (input_name,) = [i.name for i in session.get_inputs()]
    for n in BATCHES:
        assert_close(session.run(None, {input_name: inputs[n]})[0], expected[n])
    if target == "portable" and MODELS[name][3]:
        reference = onnx.reference.ReferenceEvaluator(path)
        for n in BATCHES:
            assert_close(reference.run(None, {input_name: inputs[n]})[0], expected[n], rtol=1e-4)
