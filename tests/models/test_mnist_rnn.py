"""pytorch/examples' mnist_rnn ported by changing the import: an LSTM over the rows of a
28x28 image whose batch comes from ``input.reshape(-1, 28, 28)``. Its batch stays symbolic
through the reshape and the LSTM's zero state, so every stage runs at any batch size:
eager = nn.Graph (trained two steps beside PyTorch) = saved and loaded = exported ONNX on
ONNX Runtime = served over HTTP, at batch sizes 1 and 5, against PyTorch 2.13 with the same
weights (rtol 1e-5, atol 1e-5 * max|ref|)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

import flowserve as flow
from flowserve.clients import HTTPClient
from flowserve.exporter import export
from flowserve.server import InferenceServer, ServerSettings


def mnist_rnn(lib, explicit_state: bool):
    """The example's ``Net`` (``nn.Dropout`` for its ``Dropout2d`` on 2-D input, which PyTorch
    treats as 1-D dropout); ``explicit_state``: h0/c0 built from the reshaped input's size."""
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self, dropout=0.25):
            super().__init__()
            self.rnn = nn.LSTM(input_size=28, hidden_size=16, batch_first=True)
            self.batchnorm = nn.BatchNorm1d(16)
            self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(2 * dropout)
            self.fc1, self.fc2 = nn.Linear(16, 12), nn.Linear(12, 10)

        def forward(self, input):  # noqa: A002 - the example's name
            input = input.reshape(-1, 28, 28)
            if explicit_state:
                h0 = lib.zeros(1, input.size(0), 16)
                output, hidden = self.rnn(input, (h0, lib.zeros_like(h0)))
            else:
                output, hidden = self.rnn(input)
            output = self.batchnorm(output[:, -1, :])
            output = F.relu(self.fc1(self.dropout1(output)))
            return F.log_softmax(self.fc2(self.dropout2(output)), dim=1)

    return Net


class TrainGraph(flow.nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = flow.nn.functional.nll_loss(self.model(x), y)
        loss.backward()
        return loss


def _close(got, ref):
    got = got.numpy() if hasattr(got, "numpy") and not isinstance(got, np.ndarray) else np.asarray(got)
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def _images(batch, seed):
    return np.random.default_rng(seed).standard_normal((batch, 1, 28, 28)).astype(np.float32)


@pytest.mark.parametrize("explicit_state", [False, True], ids=["default_state", "state_from_reshape"])
def test_mnist_rnn_every_stage_matches_torch_at_batch_1_and_5(explicit_state, tmp_path):
    flow.manual_seed(0)
    mine = mnist_rnn(flow, explicit_state)(dropout=0.0)  # dropout 0: training steps comparable
    theirs = mnist_rnn(torch, explicit_state)(dropout=0.0)
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in mine.state_dict().items()})
    graph = TrainGraph(mine.train(), flow.optim.SGD(mine.parameters(), lr=0.1, momentum=0.9))
    topt = torch.optim.SGD(theirs.train().parameters(), lr=0.1, momentum=0.9)
    for step in range(2):
        x, y = _images(4, step), np.random.default_rng(step).integers(0, 10, 4)
        loss = graph(flow.tensor(x), flow.tensor(y))
        topt.zero_grad()
        ref = torch.nn.functional.nll_loss(theirs(torch.from_numpy(x)), torch.from_numpy(y))
        ref.backward()
        topt.step()
        _close(float(loss), float(ref.detach()))

    flow.save(graph, tmp_path / "rnn")
    manifest = json.loads((tmp_path / "rnn" / "flowserve.json").read_text())
    assert manifest["inputs"][0]["shape"] == [-1, 1, 28, 28] and manifest["batch_note"] is None
    export(tmp_path / "rnn", tmp_path / "rnn.onnx")
    session = ort.InferenceSession(str(tmp_path / "rnn.onnx"), providers=["CPUExecutionProvider"])
    loaded = flow.load(tmp_path / "rnn")
    mine.eval(), theirs.eval()

    class Infer(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = mine

        def build(self, x):
            return self.model(x)

    infer = Infer()
    infer(flow.tensor(_images(4, 9)))  # traced at batch 4, run at 1 and 5
    settings = ServerSettings(model_path=str(tmp_path / "rnn"), host="127.0.0.1", http_port=0, grpc_port=0,
                              log_level="warning")
    with InferenceServer(settings).background() as server:
        client = HTTPClient(server.http_url)
        name = client.repository_index()[0]["name"]
        for batch in (1, 5):
            x = _images(batch, 10 + batch)
            with torch.no_grad():
                ref = theirs(torch.from_numpy(x))
            _close(mine(flow.tensor(x)), ref)  # eager
            _close(infer(flow.tensor(x)), ref)  # nn.Graph
            _close(loaded(x), ref)  # saved and loaded
            _close(session.run(None, {"x": x})[0], ref)  # exported, on ONNX Runtime
            (served,) = client.infer(name, {"x": x}).values()
            _close(served, ref)  # served
