"""nn.RNN / nn.LSTM / nn.GRU against PyTorch 2.13 (outputs, final states, gradients, parameter
names), trained in an nn.Graph as eagerly, and exported as one ONNX LSTM/GRU/RNN node per layer
and direction with a dynamic batch."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import flowserve as flow
import flowserve.nn as nn
from flowserve.exporter import export

KINDS = [(nn.LSTM, torch.nn.LSTM, {}), (nn.GRU, torch.nn.GRU, {}), (nn.RNN, torch.nn.RNN, {"nonlinearity": "relu"})]


def _close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(b).max())))


def _pair(cls, tcls, kw, **options):
    torch.manual_seed(0)
    twin = tcls(5, 4, **kw, **options)
    mine = cls(5, 4, **kw, **options)
    assert [k for k, _ in mine.named_parameters()] == [k for k, _ in twin.named_parameters()]
    mine.load_state_dict({k: flow.tensor(v.detach().numpy()) for k, v in twin.state_dict().items()})
    return mine, twin


def _states(out):
    states = out[1] if isinstance(out[1], tuple) else (out[1],)
    return [out[0], *states]


@pytest.mark.parametrize("cls,tcls,kw", KINDS, ids=["lstm", "gru", "rnn"])
@pytest.mark.parametrize("options", [dict(num_layers=2, batch_first=True, bidirectional=True),
                                     dict(bias=False), dict(num_layers=2)], ids=["deep-bi-bf", "nobias", "deep"])
def test_matches_torch(cls, tcls, kw, options):
    mine, twin = _pair(cls, tcls, kw, **options)
    x = np.random.default_rng(0).standard_normal((3, 6, 5)).astype(np.float32)
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    h0 = np.random.default_rng(1).standard_normal((layers, 3 if options.get("batch_first") else 6, 4))
    h0 = h0.astype(np.float32)
    hx_t = torch.tensor(h0) if cls is not nn.LSTM else (torch.tensor(h0), torch.tensor(h0 * 0.5))
    hx = flow.tensor(h0) if cls is not nn.LSTM else (flow.tensor(h0), flow.tensor(h0 * 0.5))
    xt, xm = torch.tensor(x, requires_grad=True), flow.tensor(x, requires_grad=True)
    ref, got = _states(twin(xt, hx_t)), _states(mine(xm, hx))
    for r, g in zip(ref, got):
        _close(g.numpy(), r.detach().numpy())
    sum(r.square().sum() for r in ref).backward()
    sum(g.square().sum() for g in got).backward()
    _close(xm.grad.numpy(), xt.grad.numpy())
    for (name, p), q in zip(mine.named_parameters(), twin.parameters()):
        _close(p.grad.numpy(), q.grad.numpy())


def test_unbatched_input_and_default_state():
    mine, twin = _pair(nn.LSTM, torch.nn.LSTM, {}, num_layers=2)
    x = np.random.default_rng(2).standard_normal((7, 5)).astype(np.float32)
    out, (h, c) = mine(flow.tensor(x))
    tout, (th, tc) = twin(torch.tensor(x))
    _close(out.numpy(), tout.detach().numpy())
    _close(c.numpy(), tc.detach().numpy())
    assert tuple(h.shape) == (2, 4)
    with pytest.raises(ValueError, match="input_size"):
        mine(flow.randn(3, 2, 6))


class LanguageModel(nn.Module):
    def __init__(self, vocab=11, width=8, cell=nn.LSTM):
        super().__init__()
        flow.manual_seed(4)
        self.embed = nn.Embedding(vocab, width)
        self.rnn = cell(width, width, num_layers=2, batch_first=True, bidirectional=cell is nn.GRU)
        self.head = nn.Linear(width * (2 if cell is nn.GRU else 1), vocab)

    def forward(self, tokens):
        return self.head(self.rnn(self.embed(tokens))[0])


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
def test_graph_training_equals_eager_and_exports_recurrent_nodes(cell, tmp_path):
    eager, model = LanguageModel(cell=cell), LanguageModel(cell=cell)
    tokens = flow.tensor(np.random.default_rng(5).integers(0, 11, (4, 6)))
    opt_e = flow.optim.Adam(eager.parameters(), lr=0.01)

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss = nn.CrossEntropyLoss()
            self.add_optimizer(flow.optim.Adam(model.parameters(), lr=0.01))

        def build(self, x):
            loss = self.loss(self.model(x[:, :-1]).reshape(-1, 11), x[:, 1:].reshape(-1))
            loss.backward()
            return loss

    graph = Train()
    for _ in range(3):
        opt_e.zero_grad()
        ref = nn.CrossEntropyLoss()(eager(tokens[:, :-1]).reshape(-1, 11), tokens[:, 1:].reshape(-1))
        ref.backward()
        opt_e.step()
        _close(float(graph(tokens)), float(ref))
    for p, q in zip(model.parameters(), eager.parameters()):
        _close(p.numpy(), q.numpy())

    class Infer(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    model.eval()
    infer = Infer()
    infer(tokens)
    flow.save(infer, tmp_path / "lm")
    result = export(tmp_path / "lm", tmp_path / "lm.onnx")
    kinds = [n.op_type for n in result.model.graph.node]
    assert kinds.count("LSTM" if cell is nn.LSTM else "GRU") == (2 if cell is nn.LSTM else 4)
    session = ort.InferenceSession(str(tmp_path / "lm.onnx"), providers=["CPUExecutionProvider"])
    loaded = flow.load(tmp_path / "lm")
    for batch in (1, 5):
        x = flow.tensor(np.random.default_rng(batch).integers(0, 11, (batch, 6)))
        ref = model(x).numpy()
        _close(session.run(None, {"x": x.numpy()})[0], ref)
        _close(loaded(x).numpy(), ref)


@pytest.mark.parametrize("name", ["LSTMCell", "GRUCell", "RNNCell"])
def test_cells_match_torch(name):
    torch.manual_seed(3)
    twin, mine = getattr(torch.nn, name)(5, 4), getattr(nn, name)(5, 4)
    assert list(mine.state_dict()) == list(twin.state_dict())
    mine.load_state_dict({k: flow.tensor(v.numpy()) for k, v in twin.state_dict().items()})
    x = np.random.default_rng(4).standard_normal((3, 5)).astype(np.float32)
    xm, xt = flow.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    state, tstate = None, None
    for _ in range(2):  # the second step starts from the first's state
        state, tstate = mine(xm, state), twin(xt, tstate)
    outs = list(state) if isinstance(state, tuple) else [state]
    touts = list(tstate) if isinstance(tstate, tuple) else [tstate]
    for o, t in zip(outs, touts):
        _close(o.numpy(), t.detach().numpy())
    sum(o.sum() for o in outs).backward()
    sum(t.sum() for t in touts).backward()
    _close(xm.grad.numpy(), xt.grad.numpy())
    _close(mine.weight_hh.grad.numpy(), twin.weight_hh.grad.numpy())
    single = mine(flow.tensor(x[0]))
    assert (single[0] if isinstance(single, tuple) else single).shape == flow.Size([4])
