"""``.double()`` models in nn.Graph: the ops ONNX Runtime has no double kernels for (Conv,
ConvTranspose, Erf, LSTM, GRU, RNN) are lowered to ones it has, so a float64 graph keeps
float64's precision: it equals eager float64 and PyTorch float64 to ~1e-12, inference and
training, saved, loaded and exported."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import flowserve as flow
from flowserve.errors import GraphError
from flowserve.exporter import export


def _net(lib):
    nn = lib.nn

    class Net(nn.Module):
        """Convolutions (strided, depthwise, transposed), batch norm, GELU (erf), pooling,
        a bidirectional LSTM and a GRU over the feature map's pixels, a linear head."""

        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.GELU(), nn.MaxPool2d(2),
                nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8),
                nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
                nn.AdaptiveAvgPool2d(2))
            self.rnn = nn.LSTM(4, 6, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(12, 5, batch_first=True)
            self.head = nn.Linear(5, 3)

        def forward(self, x):
            seq = self.features(x).flatten(2).transpose(1, 2)  # (B, 4 pixels, 4 channels)
            out, _ = self.gru(self.rnn(seq)[0])
            return self.head(out[:, -1])

    return Net


def _twins():
    flow.manual_seed(0)
    mine = _net(flow)().double()
    theirs = _net(torch)().double()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in mine.state_dict().items()})
    return mine, theirs


def _close(got, ref, tol=1e-12):
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))


def _images(batch, seed):
    return np.random.default_rng(seed).standard_normal((batch, 3, 16, 16))


class _Infer(flow.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def test_double_convnet_and_rnn_graph_equals_eager_and_torch_saved_and_exported(tmp_path):
    mine, theirs = _twins()
    mine.eval(), theirs.eval()
    graph = _Infer(mine)
    graph(flow.tensor(_images(2, 0)))
    flow.save(graph, tmp_path / "g")
    export(tmp_path / "g", tmp_path / "g.onnx")
    session = ort.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    loaded = flow.load(tmp_path / "g")
    for batch in (1, 5):
        x = _images(batch, batch)
        with torch.no_grad():
            ref = theirs(torch.from_numpy(x))
        eager = mine(flow.tensor(x))
        _close(eager, ref)
        _close(graph(flow.tensor(x)), eager)
        _close(loaded(x), eager)
        _close(session.run(None, {"x": x})[0], eager)


def test_double_training_graph_equals_torch():
    mine, theirs = _twins()
    mine.train(), theirs.train()
    optimizer = flow.optim.SGD(mine.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9)

    class Train(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = mine
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = flow.nn.functional.cross_entropy(self.model(x), y)
            loss.backward()
            return loss

    graph = Train()
    for step in range(2):
        x, y = _images(4, step), np.random.default_rng(step).integers(0, 3, 4)
        loss = graph(flow.tensor(x), flow.tensor(y))
        topt.zero_grad()
        ref = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y))
        ref.backward()
        topt.step()
        _close(loss, ref.detach())
    for (name, p), q in zip(mine.state_dict().items(), theirs.state_dict().values()):
        if p.dtype == flow.float64:
            _close(p, q)


def test_double_erf_over_its_whole_range():
    x = np.concatenate([np.linspace(-30, 30, 601), [-8.0, -1.0, 0.0, 1.0, 8.0, 1e-300, -np.inf, np.inf]])

    class Erf(flow.nn.Graph):
        def build(self, t):
            return flow.erf(t)

    got = Erf()(flow.tensor(x)).numpy()
    np.testing.assert_allclose(got, torch.erf(torch.from_numpy(x)).numpy(), rtol=1e-15, atol=1e-300)


def test_an_op_without_a_kernel_in_its_dtype_is_refused_in_one_line(monkeypatch):
    import flowserve.onnx_backend.lowering.conv as conv_lowering

    monkeypatch.setattr(conv_lowering, "is_double", lambda ctx, name: False)  # the plain double Conv
    graph = _Infer(flow.nn.Conv2d(3, 4, 3).double())
    with pytest.raises(GraphError, match=r"^nn.Graph _Infer_\d+: ONNX Runtime has no Conv kernel in float64 "
                                         r"\(node 'model/conv_\d+'\)[^\n]*$"):
        graph(flow.tensor(_images(1, 0)))
