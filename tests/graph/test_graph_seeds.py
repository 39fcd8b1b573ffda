"""The nn.Graph documents' examples (OneFlow's API reference and guide), with
``import flowserve as flow``, and the examples/ scripts that mirror the guide."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import flowserve as flow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(*argv) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / argv[0]), *argv[1:]], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_api_reference_examples():
    class LinearGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.linear = flow.nn.Linear(3, 8, False)

        def build(self, x):
            return self.linear(x)

    linear_graph = LinearGraph()
    x = flow.randn(4, 3)
    assert linear_graph(x).shape == flow.Size([4, 8])
    assert linear_graph(x).shape == flow.Size([4, 8])

    loss_fn = flow.nn.MSELoss(reduction="sum")
    model = flow.nn.Sequential(flow.nn.Linear(3, 1), flow.nn.Flatten(0, 1))
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-6)

    class LinearTrainGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = loss_fn
            self.add_optimizer(optimizer)

        def build(self, x, y):
            y_pred = self.model(x)
            loss = self.loss_fn(y_pred, y)
            loss.backward()
            return loss

    graph = LinearTrainGraph()
    x, y = flow.randn(10, 3), flow.randn(10)
    model.train()
    losses = [float(graph(x, y).numpy()) for _ in range(3)]
    assert losses[2] < losses[0]


def test_module_wrapped_for_deployment(tmp_path):
    class MyGraph(flow.nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def build(self, *input):
            return self.model(*input)

    model = flow.nn.Sequential(flow.nn.Linear(6, 4), flow.nn.ReLU())
    model.eval()
    graph = MyGraph(model)
    fake = flow.ones((1, 6))
    out = graph(fake)
    flow.save(graph, tmp_path / "model")
    loaded = flow.load(tmp_path / "model")
    np.testing.assert_allclose(loaded(fake).numpy(), out.numpy(), rtol=1e-6)
    batch = flow.randn(5, 6)
    np.testing.assert_allclose(loaded(batch).numpy(), model(batch).numpy(), rtol=1e-5, atol=1e-6)


def test_save_load_example_resumes_exactly():
    out = _run("graph_save_load.py")
    assert "model.0.weight-m" in out and "train step 3" in out
    assert "resumed run equals an uninterrupted one: True" in out


def test_mobilenet_training_example_runs():
    out = _run("graph_mobilenet_train.py", "--steps", "2", "--batch", "4")
    assert "Using cpu device" in out and "loss:" in out


def test_debug_repr_example_prints_both_forms():
    out = _run("graph_debug_repr.py", "--v-level", "0")
    assert out.count("(GRAPH:GraphMobileNetV2_0:GraphMobileNetV2): (") == 2
    assert "start building graph." in out and "(INPUT:_model-input_0:" in out


def test_execution_provider_example():
    out = _run("graph_execution_provider.py", "--steps", "2")
    rows = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(rows) == 2 and "cpu loss" in rows[0], out
    for row in rows:  # every provider from the same start gives the same loss
        losses = [float(v) for v in re.findall(r"loss (\S+)", row)]
        assert max(losses) - min(losses) <= 1e-4 * abs(losses[0]), row
