"""Graph passes that rewrite convolutions keep the results: one training step of a conv
net in a graph moves every parameter as eager gradients say."""

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from tests.graph.helpers import assert_close, assert_same_params


def convnet():
    flow.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1),
                         nn.ReLU(), nn.Conv2d(8, 4, 1), nn.Flatten(), nn.Linear(4 * 16 * 16, 5))


class Step(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=1.0))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def test_weight_gradient_convs_become_matmuls_with_eager_gradients():
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    y = flow.tensor(rng.integers(0, 5, 8))
    eager = convnet()
    nn.CrossEntropyLoss()(eager(x), y).backward()
    model = convnet()
    before = [p.numpy().copy() for p in model.parameters()]
    graph = Step(model)
    graph(x, y)
    ir = graph._last.traced.ir
    assert "conv_weight_grad_as_matmul" in ir.attrs["passes"]
    # every conv's weight gradient became one matmul of its stacked taps: the first's 9 taps
    # (8 images of 32x32: 8192-long products) and the strided one's 9 (its 4x4 gradient conv
    # cropped to the 3x3 kernel: only the kept taps), each gathered by one take, and the
    # pointwise one's single tap, a slice
    def per_conv(op):
        found = [n.outputs[0].split("/wg_")[0] for n in ir.nodes if n.op == op and "/wg_" in n.outputs[0]]
        return sorted(found.count(name) for name in set(found))
    assert per_conv("take") == [1, 1]
    assert per_conv("slice") == [1]
    assert per_conv("matmul") == [1, 1, 1]
    # the taps' flat positions in the padded 34x34 input: rows are the output gradient's
    # positions, columns the kernel's (stride 1, then stride 2)
    first, strided = sorted((graph._last.traced.constants[n.inputs[1]] for n in ir.nodes if n.op == "take"),
                            key=len, reverse=True)
    assert first.shape == (32 * 32, 9) and first[0].tolist() == [0, 1, 2, 34, 35, 36, 68, 69, 70]
    assert first[33].tolist() == [35, 36, 37, 69, 70, 71, 103, 104, 105]  # position (1, 1)
    assert strided.shape == (16 * 16, 9) and strided[17].tolist() == [70, 71, 72, 104, 105, 106, 138, 139, 140]
    for p0, p, e in zip(before, model.parameters(), eager.parameters()):
        assert_close(p0 - p.numpy(), e.grad.numpy(), rtol=1e-5)


def bn_convnet():
    flow.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Flatten(), nn.Linear(8 * 16 * 16, 5))


class MomentumStep(nn.Graph):
    def __init__(self, model, stacked: bool, bn_kernel: bool):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
        self.config.set_execution_provider("cpu")
        self.config.allow_stacked_weight_gradient(stacked)
        self.config.allow_cpu_batch_norm_kernel(bn_kernel)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def _trains_as_eager(net, x, y, stacked: bool = True, bn_kernel: bool = True) -> nn.Graph:
    """Three SGD steps (``MomentumStep``'s) of a fresh ``net()`` in eager mode and of another in
    a ``MomentumStep`` graph give the same losses and weights; returns the graph."""
    eager = net()
    opt = flow.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    expected = []
    for _ in range(3):
        loss = nn.CrossEntropyLoss()(eager(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        expected.append(float(loss.numpy()))
    model = net()
    graph = MomentumStep(model, stacked, bn_kernel)
    losses = [float(graph(x, y).numpy()) for _ in range(3)]
    assert_close(losses, expected, rtol=1e-5)
    assert_same_params(model, eager, rtol=1e-4)
    return graph


@pytest.mark.parametrize("stacked,bn_kernel", [(True, True), (False, True), (True, False), (False, False)])
def test_lowering_options_train_as_eager(stacked, bn_kernel):
    """``allow_stacked_weight_gradient`` and ``allow_cpu_batch_norm_kernel``, on or off:
    three training steps give eager mode's losses and weights, through the lowering asked for
    (batch norm's backward per-channel ``x * s + c`` as ``BatchNormalization`` in either case)."""
    rng = np.random.default_rng(1)
    x = flow.tensor(rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    y = flow.tensor(rng.integers(0, 5, 8))
    graph = _trains_as_eager(bn_convnet, x, y, stacked, bn_kernel)
    matmuls = [n for n in graph._last.traced.ir.nodes if n.op == "matmul" and "/wg_" in n.outputs[0]]
    assert len(matmuls) == (2 if stacked else 18)  # one per conv, else one per kept tap (9 each)
    norms = [n for n in graph._compiled.model.graph.node if n.op_type == "BatchNormalization"]
    training = [n for n in norms if any(a.name == "training_mode" and a.i for a in n.attribute)]
    assert len(training) == (2 if bn_kernel else 0), norms
    # each layer's backward ``d * A + B`` (per-channel A and B) is one inference-mode kernel
    assert len(norms) - len(training) == 2, norms


def wide_kernel_net():
    """A convolution whose kernel nearly covers its input (8x8 over 10x10, 16 channels: 1024
    products per output, 3x3 outputs): the weight-gradient pass takes it for one, though its
    input is the graph's input, not a layer input transposed by ``weight_grad``."""
    flow.manual_seed(0)
    return nn.Sequential(nn.Conv2d(16, 4, 8, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 5))


def test_weight_gradient_pass_gathers_from_an_untraced_input():
    """Where the pass cannot trace the convolution's input back to a ``(N, C, H, W)`` layer
    input (``reshape``, ``permute``, ``reshape``), it lays out the input it has: three
    training steps still give eager mode's losses and weights."""
    rng = np.random.default_rng(2)
    x = flow.tensor(rng.standard_normal((6, 16, 10, 10)).astype(np.float32))
    y = flow.tensor(rng.integers(0, 5, 6))
    graph = _trains_as_eager(wide_kernel_net, x, y)
    ir = graph._last.traced.ir
    takes = [n for n in ir.nodes if n.op == "take" and "/wg_" in n.outputs[0]]
    assert len(takes) == 1
    layout = ir.producers()[takes[0].inputs[0]]  # (N, H*W, C) rows of the padded input ...
    while layout.op != "permute":
        layout = ir.producers()[layout.inputs[0]]
    assert layout.inputs == [ir.inputs[0].name]  # ... of the input as given
    assert list(layout.attrs["perm"]) == [1, 2, 3, 0]
