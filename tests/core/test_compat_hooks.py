"""``flow._C`` (OneFlow's functional namespace) and the torch-compat hooks model files call
(``fx.wrap``, ``jit.*``, ``utils.tensorboard.SummaryWriter``), checked against the eager ops
they map to and against PyTorch."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flowserve as flow
import flowserve.nn as nn
import flowserve.nn.functional as F

RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((4, 5)).astype(np.float32)
LABELS = np.array([0, 3, 4, 1])


def test_c_names_are_the_eager_ops_they_map_to():
    for name in flow._C._FROM_FUNCTIONAL:
        assert getattr(flow._C, name) is getattr(F, name), name
    for name in flow._C._FROM_FLOW:
        assert getattr(flow._C, name) is getattr(flow, name), name
    x = flow.tensor(LOGITS)
    for name, ref in (("relu", TF.relu), ("gelu", TF.gelu), ("silu", TF.silu)):
        np.testing.assert_allclose(getattr(flow._C, name)(x).numpy(), ref(torch.tensor(LOGITS)).numpy(), rtol=1e-6,
                                   atol=1e-6)
    np.testing.assert_allclose(flow._C.softmax(x, -1).numpy(), TF.softmax(torch.tensor(LOGITS), -1).numpy(), atol=1e-6)
    assert flow._C._log_api_usage_once("torchvision.models.resnet.ResNet") is None
    with pytest.raises(AttributeError, match=r"oneflow\._C\.frobnicate"):
        flow._C.frobnicate


def test_one_hot_follows_oneflow_on_and_off_values():
    index = flow.tensor(LABELS)
    plain = flow._C.one_hot(index, 5)
    assert plain.dtype == flow.int64
    np.testing.assert_array_equal(plain.numpy(), TF.one_hot(torch.tensor(LABELS), 5).numpy())
    smooth = flow._C.one_hot(index, 5, 0.9, 0.025)
    assert smooth.dtype == flow.float32
    expected = np.where(TF.one_hot(torch.tensor(LABELS), 5).numpy() == 1, np.float32(0.9), np.float32(0.025))
    np.testing.assert_array_equal(smooth.numpy(), expected)
    assert flow._C.one_hot(index).shape == (4, 5)  # num_classes=-1: max + 1


def test_softmax_cross_entropies_match_torch_with_gradients():
    soft = RNG.dirichlet(np.ones(5), 4).astype(np.float32)
    x, tx = flow.tensor(LOGITS, requires_grad=True), torch.tensor(LOGITS, requires_grad=True)
    got = flow._C.softmax_cross_entropy(x, flow.tensor(soft))
    ref = TF.cross_entropy(tx, torch.tensor(soft), reduction="none")
    np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-6)
    got.sum().backward(), ref.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    sparse = flow._C.sparse_softmax_cross_entropy(flow.tensor(LOGITS), flow.tensor(LABELS))
    np.testing.assert_allclose(sparse.numpy(), TF.cross_entropy(torch.tensor(LOGITS), torch.tensor(LABELS),
                                                                reduction="none").numpy(), rtol=1e-6, atol=1e-6)


def test_matmul_transposes_and_bias_add_match_torch():
    a, b = RNG.standard_normal((2, 3, 4)).astype(np.float32), RNG.standard_normal((2, 5, 4)).astype(np.float32)
    got = flow._C.matmul(flow.tensor(a), flow.tensor(b), transpose_b=True, alpha=0.5)
    np.testing.assert_allclose(got.numpy(), 0.5 * (torch.tensor(a) @ torch.tensor(b).transpose(-2, -1)).numpy(),
                               rtol=1e-6, atol=1e-6)
    got = flow._C.matmul(flow.tensor(a), flow.tensor(a), transpose_a=True)
    np.testing.assert_allclose(got.numpy(), (torch.tensor(a).transpose(-2, -1) @ torch.tensor(a)).numpy(), rtol=1e-5,
                               atol=1e-5)
    bias = RNG.standard_normal(3).astype(np.float32)
    got = flow._C.bias_add(flow.tensor(a), flow.tensor(bias), axis=1)
    np.testing.assert_allclose(got.numpy(), a + bias[None, :, None], rtol=0, atol=0)


class LabelSmoothLoss(nn.Module):
    """OneFlow's ResNet-50 training loss, as its own code writes it."""

    def __init__(self, num_classes, smooth_rate):
        super().__init__()
        self.num_classes, self.on_value = num_classes, 1 - smooth_rate
        self.off_value = smooth_rate / (num_classes - 1)

    def forward(self, logits, label):
        onehot = flow._C.one_hot(label, self.num_classes, self.on_value, self.off_value)
        return flow._C.softmax_cross_entropy(logits, onehot.to(dtype=logits.dtype)).mean()


def test_c_ops_trace_in_a_graph_and_train_like_eager():
    flow.manual_seed(0)
    model, eager = nn.Linear(5, 5), nn.Linear(5, 5)
    eager.load_state_dict(model.state_dict())
    loss_fn, seen = LabelSmoothLoss(5, 0.1), []

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model, self.loss_fn = model, loss_fn
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.5))

        def build(self, x, y):
            seen.append(flow.jit.is_tracing())
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    opt = flow.optim.SGD(eager.parameters(), lr=0.5)
    graph = Train()
    for _ in range(2):
        x, y = flow.tensor(LOGITS), flow.tensor(LABELS)
        got = graph(x, y)
        opt.zero_grad()
        ref = loss_fn(eager(x), y)
        ref.backward()
        opt.step()
        np.testing.assert_allclose(float(got), float(ref), rtol=1e-5)
    assert seen == [True] and not flow.jit.is_tracing()
    np.testing.assert_allclose(model.weight.numpy(), eager.weight.numpy(), rtol=1e-5, atol=1e-6)


def test_jit_hooks_answer_as_outside_torchscript():
    assert flow.jit.is_scripting() is torch.jit.is_scripting() is False
    assert flow.jit.is_tracing() is torch.jit.is_tracing() is False

    class M(nn.Module):
        @flow.jit.unused
        def a(self):
            return 1

        @flow.jit.ignore
        def b(self):
            return 2

        @flow.jit.ignore(drop=True)
        def c(self):
            return 3

        @flow.jit.export
        def d(self):
            return 4

    m = M()
    assert (m.a(), m.b(), m.c(), m.d()) == (1, 2, 3, 4)
    assert flow.jit.annotate(list, []) == []
    with pytest.raises(AttributeError, match="nn.Graph"):
        flow.jit.script


def test_fx_wrap_returns_its_argument_as_torchvisions_stochastic_depth_uses_it():
    assert flow.fx.wrap("stochastic_depth") == "stochastic_depth"  # torch.fx.wrap returns its argument too

    def stochastic_depth(x):
        return x

    assert flow.fx.wrap(stochastic_depth) is stochastic_depth
    with pytest.raises(TypeError, match="function"):
        flow.fx.wrap(3)


def test_summary_writer_writes_events_tensorboard_reads(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from flowserve.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=tmp_path) as writer:
        for step in range(3):
            writer.add_scalar("Loss/train", flow.tensor(1.0 / (step + 1)), step)
        writer.add_scalars("acc", {"train": 0.5, "test": 0.25}, 2)
        writer.add_histogram("weights", flow.randn(100), 0)
        writer.add_text("note", "hello", 0)
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    events.Reload()
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("Loss/train")] == [(0, 1.0), (1, 0.5), (2, 0.333333)]
    assert events.Scalars("acc/test")[0].value == 0.25
    assert events.Histograms("weights")[0].histogram_value.num == 100
    assert writer.get_logdir() == str(tmp_path)


def test_summary_writer_without_tensorboard_fails_only_when_used(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    for name in [m for m in sys.modules if m.startswith("tensorboard.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "flowserve.utils.tensorboard", raising=False)
    from flowserve.utils.tensorboard import SummaryWriter  # importing needs nothing

    with pytest.raises(ImportError, match="pip install tensorboard"):
        SummaryWriter(tmp_path)


def test_torchvision_style_model_file_runs_with_only_the_import_changed():
    """The calls torchvision's model files make (``_log_api_usage_once`` in ``__init__``,
    ``fx.wrap`` at import, ``jit.is_scripting``/``is_tracing``, stochastic depth built on
    ``empty(size).bernoulli_()``), written here with ``flowserve`` imported as ``torch``."""
    import flowserve as torch_

    torch_.fx.wrap("stochastic_depth")

    def stochastic_depth(input, p, mode, training=True):  # noqa: A002
        if not torch_.jit.is_scripting() and not torch_.jit.is_tracing():
            torch_._C._log_api_usage_once("stochastic_depth")
        if not training or p == 0.0:
            return input
        size = [input.shape[0]] + [1] * (input.ndim - 1) if mode == "row" else [1] * input.ndim
        noise = torch_.empty(size, dtype=input.dtype, device=input.device).bernoulli_(1.0 - p)
        return input * noise.div_(1.0 - p)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            torch_._C._log_api_usage_once(self)
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            return x + stochastic_depth(self.linear(x), 0.5, "row", self.training)

    block = Block()
    x = flow.randn(64, 4)
    noisy = block(x) - x
    dropped = (noisy.abs().sum(1) == 0).float().mean().item()
    assert 0.2 < dropped < 0.8  # whole rows dropped, the rest scaled by 2
    block.eval()

    class Infer(nn.Graph):
        def __init__(self):
            super().__init__()
            self.block = block

        def build(self, v):
            return self.block(v)

    np.testing.assert_allclose(Infer()(x).numpy(), block(x).numpy(), rtol=1e-6, atol=1e-6)
