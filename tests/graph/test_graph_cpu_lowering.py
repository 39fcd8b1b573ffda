"""Training steps lowered for ONNX Runtime's CPU provider keep PyTorch's numbers.

Linear weight gradients are one ``Gemm(transA=1)`` holding SGD's momentum as its ``C``,
state updates are written by the nodes computing them (no ``Identity`` copies), bias
gradients (sums over the batch, 2-D and 3-D) are a ``MatMul`` with ones. A model with
each trains three steps as an nn.Graph, eagerly and in PyTorch from the same weights.
"""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn

torch = pytest.importorskip("torch")
STEPS = 3


class _Model:
    """Linear layers on 2-D and 3-D inputs (a token axis), the same in both libraries."""

    @staticmethod
    def build(lib):
        class Net(lib.Module):
            def __init__(self):
                super().__init__()
                self.embed = lib.Linear(6, 24)
                self.mix = lib.Linear(24, 24)
                self.head = lib.Linear(24, 5)

            def forward(self, x):  # x: (batch, tokens, 6)
                h = self.mix(self.embed(x).relu()).tanh()
                return self.head(h.mean(1))

        return Net()


class _Step(nn.Graph):
    def __init__(self, model, opt):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(opt)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def _models():
    flow.manual_seed(0)
    ours = _Model.build(nn)
    theirs = _Model.build(torch.nn)
    theirs.load_state_dict({k: torch.tensor(v.numpy().copy()) for k, v in ours.state_dict().items()})
    return ours, theirs


def _data():
    rng = np.random.default_rng(7)
    return rng.standard_normal((32, 4, 6)).astype(np.float32), rng.integers(0, 5, 32)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_linear_training_step_matches_pytorch(momentum):
    x, y = _data()
    ours, theirs = _models()
    eager, _ = _models()
    graph = _Step(ours, flow.optim.SGD(ours.parameters(), lr=0.1, momentum=momentum))
    losses = [float(graph(flow.tensor(x), flow.tensor(y)).numpy()) for _ in range(STEPS)]
    opt = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=momentum)
    eager_opt = flow.optim.SGD(eager.parameters(), lr=0.1, momentum=momentum)
    expected, eager_losses = [], []
    for _ in range(STEPS):
        loss = torch.nn.CrossEntropyLoss()(theirs(torch.tensor(x)), torch.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        expected.append(loss.item())
        loss = nn.CrossEntropyLoss()(eager(flow.tensor(x)), flow.tensor(y))
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
        eager_losses.append(float(loss.numpy()))
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    np.testing.assert_allclose(eager_losses, expected, rtol=1e-5)
    want = theirs.state_dict()
    for name, value in ours.state_dict().items():
        np.testing.assert_allclose(value.numpy(), want[name].numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    for name, value in eager.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[name].numpy(), value.numpy(), rtol=1e-5, atol=1e-6)

    nodes = graph._compiled.model.graph.node
    ops = [n.op_type for n in nodes]
    assert "Identity" not in ops  # every state update is written where it is bound
    gemms = [n for n in nodes if n.op_type == "Gemm" and any(a.name == "transA" and a.i == 1 for a in n.attribute)]
    # dW of the 2-D layer (head); embed and mix see (batch*tokens, features) through reshapes
    assert gemms, ops
    if momentum:
        assert any(len(n.input) == 3 for n in gemms)  # the momentum is the Gemm's C
    assert "ReduceSum" not in [n.op_type for n in nodes if any("bias" in o for o in n.output)]


def test_bias_sums_are_matmuls_with_ones():
    """The three bias gradients (over 32 rows, and over 32x4 token rows) are MatMuls."""
    x, y = _data()
    ours, _ = _models()
    graph = _Step(ours, flow.optim.SGD(ours.parameters(), lr=0.1))
    graph(flow.tensor(x), flow.tensor(y))
    nodes = graph._compiled.model.graph.node
    ones = [n for n in nodes if n.op_type == "ConstantOfShape"]
    assert len(ones) >= 3, [n.op_type for n in nodes]


def test_thread_spinning_follows_the_config():
    """Threads sleep between operators unless the config lets them spin; the step's
    numbers are the same either way."""
    x, y = _data()
    losses = []
    for spin in (None, True):
        ours, _ = _models()
        graph = _Step(ours, flow.optim.SGD(ours.parameters(), lr=0.1))
        if spin:
            graph.config.allow_thread_spinning(True)
        losses.append(float(graph(flow.tensor(x), flow.tensor(y)).numpy()))
        session_options = graph._compiled.session.get_session_options()
        assert session_options.get_session_config_entry("session.intra_op.allow_spinning") == ("1" if spin else "0")
    assert losses[0] == losses[1]
