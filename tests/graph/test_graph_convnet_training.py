"""Convnet training in graph mode gives eager's and PyTorch's numbers.

The training graph's lowering rewrites batch norm (closed-form gradient), activation
gradients (one Where), stride-1 input gradients (flipped-kernel Conv), pointwise input
gradients (MatMul) and weight gradients (matrix products); each keeps the same sums. A
small network holding every such layer trains three steps eagerly, as an nn.Graph and in
PyTorch from the same weights: losses, parameters and running statistics agree.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

import flowserve as flow
import flowserve.nn as nn
from flowserve.onnx_backend import openvino, runtime
from flowserve.onnx_backend.lowering import scalars

from tests.graph.helpers import TrainGraph

torch = pytest.importorskip("torch")
STEPS = 3


def _layers(lib):
    return [
        lib.Conv2d(3, 8, 3, 1, 1, bias=False), lib.BatchNorm2d(8), lib.ReLU6(),             # stride-1 3x3
        lib.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), lib.BatchNorm2d(8), lib.ReLU6(),  # depthwise
        lib.Conv2d(8, 16, 1, bias=False), lib.BatchNorm2d(16),                              # pointwise
        lib.Conv2d(16, 16, 3, 2, 1, bias=False), lib.BatchNorm2d(16), lib.ReLU(),          # strided
        lib.Conv2d(16, 16, 3, 1, 2, dilation=2, groups=4), lib.BatchNorm2d(16, affine=False), lib.ReLU(),
        lib.AdaptiveAvgPool2d(1), lib.Flatten(), lib.Linear(16, 5),
    ]


def _models():
    flow.manual_seed(0)
    ours = nn.Sequential(*_layers(nn))
    theirs = torch.nn.Sequential(*_layers(torch.nn))
    theirs.load_state_dict({k: torch.tensor(v.numpy().copy()) for k, v in ours.state_dict().items()})
    return ours, theirs


def _data():
    rng = np.random.default_rng(3)
    return rng.standard_normal((6, 3, 10, 10)).astype(np.float32), rng.integers(0, 5, 6)


def _train_graph(model, provider="cpu"):
    return TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), provider=provider)


def _eager_losses(model, x, y):
    opt = flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(STEPS):
        loss = nn.CrossEntropyLoss()(model(flow.tensor(x)), flow.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    return losses


def _graph_losses(model, x, y, provider="cpu"):
    graph = _train_graph(model, provider)
    return [float(graph(flow.tensor(x), flow.tensor(y)).numpy()) for _ in range(STEPS)]


def _torch_losses(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(STEPS):
        loss = torch.nn.CrossEntropyLoss()(model(torch.tensor(x)), torch.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _assert_state_close(ours, theirs, rtol=1e-4, atol=1e-5):
    expected = theirs.state_dict()
    for name, value in ours.state_dict().items():
        np.testing.assert_allclose(value.numpy(), expected[name].numpy(), rtol=rtol, atol=atol, err_msg=name)


def test_graph_and_eager_training_match_pytorch():
    x, y = _data()
    graph_model, reference = _models()
    eager_model, _ = _models()
    graph = _graph_losses(graph_model, x, y)
    eager = _eager_losses(eager_model, x, y)
    expected = _torch_losses(reference, x, y)
    np.testing.assert_allclose(graph, expected, rtol=1e-4)
    np.testing.assert_allclose(eager, expected, rtol=1e-4)
    assert graph[-1] < graph[0]  # it trains
    _assert_state_close(graph_model, reference)  # weights, running mean and unbiased running var
    _assert_state_close(eager_model, reference)


def test_batch_norm_gradients_match_pytorch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32) * 3 + 2
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    cot = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    ours = [flow.tensor(a, requires_grad=True) for a in (x, w, b)]
    out = nn.functional.batch_norm(ours[0], flow.zeros(3), flow.ones(3), ours[1], ours[2], training=True)
    (out * flow.tensor(cot)).sum().backward()
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    expected = torch.nn.functional.batch_norm(theirs[0], torch.zeros(3), torch.ones(3), theirs[1], theirs[2],
                                              training=True)
    (expected * torch.tensor(cot)).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-5)
    for a, e in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), e.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_training_graph_lowering():
    """On ONNX Runtime's CPU provider batch norm's statistics are one BatchNormalization in
    training mode (its lowering), its gradient's per-channel affine map one in inference
    mode, the stride-1 input gradient is a Conv."""
    model = nn.Sequential(nn.Conv2d(4, 4, 3, 1, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU6(),
                          nn.Conv2d(4, 4, 3, 1, 1))
    graph = _train_graph(model)
    graph(flow.tensor(np.ones((2, 4, 5, 5), np.float32)), flow.tensor(np.zeros((2, 5, 5), np.int64)))
    ops = [n.op_type for n in graph._compiled.model.graph.node]
    assert "ConvTranspose" not in ops  # the stride-1 input gradient is a Conv
    # whose kernel is flipped by a product with the anti-diagonal permutation of its 9 taps
    constants = {t.name: numpy_helper.to_array(t) for t in graph._compiled.model.graph.initializer}
    flips = [n for n in graph._compiled.model.graph.node if n.op_type == "MatMul" and n.input[1] in constants]
    assert [constants[n.input[1]].tolist() for n in flips] == [np.eye(9)[::-1].tolist()]
    assert "ReduceMean" not in ops, ops
    modes = [{a.name: a.i for a in n.attribute if a.name == "training_mode"}
             for n in graph._compiled.model.graph.node if n.op_type == "BatchNormalization"]
    # the statistics, and the backward pass's per-channel ``d * A + B`` (inference mode)
    assert sorted(modes, key=len) == [{}, {"training_mode": 1}], modes


def _small_map_layers(lib):
    return [lib.Conv2d(3, 8, 3, 1, 1, bias=False), lib.BatchNorm2d(8), lib.ReLU(),  # 4x4 maps
            lib.Conv2d(8, 8, 3, 2, 1), lib.BatchNorm2d(8), lib.ReLU(),              # 2x2 maps
            lib.Flatten(), lib.Linear(32, 5)]


def test_small_map_batch_norm_backward_trains_as_pytorch():
    """On maps of at most 16 positions batch norm's backward ``x - mean`` and ``g * k`` are
    inference-mode ``BatchNormalization``s, and with a batch of 16 or more its sums over
    the batch and positions are products with a row of ones: same numbers as PyTorch."""
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((16, 3, 4, 4)).astype(np.float32), rng.integers(0, 5, 16)
    flow.manual_seed(0)
    ours, theirs = nn.Sequential(*_small_map_layers(nn)), torch.nn.Sequential(*_small_map_layers(torch.nn))
    theirs.load_state_dict({k: torch.tensor(v.numpy().copy()) for k, v in ours.state_dict().items()})
    graph = _train_graph(ours)
    losses = [float(graph(flow.tensor(x), flow.tensor(y)).numpy()) for _ in range(STEPS)]
    np.testing.assert_allclose(losses, _torch_losses(theirs, x, y), rtol=1e-5)
    _assert_state_close(ours, theirs)
    nodes = graph._compiled.model.graph.node
    modes = [any(a.name == "training_mode" and a.i for a in n.attribute) for n in nodes
             if n.op_type == "BatchNormalization"]
    assert modes.count(True) == 2 and modes.count(False) == 6, modes  # d * A + B, x - mean, g * k per layer
    constants = {t.name: numpy_helper.to_array(t) for t in graph._compiled.model.graph.initializer}
    ones = {name for name, a in constants.items() if a.shape == (1, 16) and (a == 1).all()}
    ones |= {n.output[0] for n in nodes if n.op_type == "ConstantOfShape"}
    sums = [n for n in nodes if n.op_type == "MatMul" and n.input[0] in ones]
    assert len(sums) == 6, [n.op_type for n in nodes]  # two per batch norm, the conv's and linear's biases


class _Grads(nn.Graph):
    """A training graph whose SGD step (lr 1, no momentum) exposes the gradient."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=1.0))

    def build(self, x):
        loss = (self.model(x) * flow.tensor(np.arange(1.0, 9.0, dtype=np.float32))).sum()
        loss.backward()
        return loss


@pytest.mark.parametrize("act", [nn.ReLU6(), nn.Hardtanh(-0.5, 0.25)])
def test_clamp_gradient_mask_keeps_gradients(act):
    """Values exactly at the bounds included (the masks' ties)."""
    x = np.array([[-1.0, 0.0, 0.5, 6.0, 7.0, -0.5, 0.25, 3.0]], np.float32)
    flow.manual_seed(0)
    graph_model, eager_model = nn.Sequential(nn.Linear(8, 8), act), nn.Sequential(nn.Linear(8, 8), act)
    eager_model.load_state_dict(graph_model.state_dict())
    with flow.no_grad():  # pre-activations exactly x: identity weights, zero bias
        for m in (graph_model, eager_model):
            m[0].weight.copy_(flow.tensor(np.eye(8, dtype=np.float32)))
            m[0].bias.copy_(flow.tensor(np.zeros(8, np.float32)))
    graph = _Grads(graph_model)
    graph(flow.tensor(x))
    assert "fold_clamp_gradient_masks" in graph._compiled.traced.ir.attrs["passes"]
    loss = (eager_model(flow.tensor(x)) * flow.tensor(np.arange(1.0, 9.0, dtype=np.float32))).sum()
    loss.backward()
    expected_bias = np.zeros(8, np.float32) - eager_model[0].bias.grad.numpy()
    np.testing.assert_array_equal(graph_model[0].bias.numpy(), expected_bias)


def test_relu6_lowers_to_one_clip():
    """ReLU6's ``minimum(maximum(x, 0), 6)`` is one ONNX Clip, with no constant left unread."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3, 1, 1), nn.ReLU6(), nn.Flatten(), nn.Linear(4 * 25, 3))
    graph = _train_graph(model)
    graph(flow.tensor(np.random.default_rng(0).standard_normal((2, 3, 5, 5)).astype(np.float32)),
          flow.tensor(np.array([0, 2])))
    onnx_graph = graph._compiled.model.graph
    ops = [n.op_type for n in onnx_graph.node]
    assert ops.count("Clip") == 1 and "Max" not in ops and "Min" not in ops, ops
    read = {name for n in onnx_graph.node for name in n.input}
    assert all(init.name in read for init in onnx_graph.initializer)


def test_one_element_operands_take_the_result_rank():
    """Where a broadcasting operator's result ends in a dim of 1 (the pointwise weight's
    momentum updates, the pooled map), no one-element operand has a lower rank: ONNX
    Runtime's CPU kernels step through such broadcasts one element at a time. The
    numbers are PyTorch's (``test_graph_and_eager_training_match_pytorch``)."""
    x, y = _data()
    graph_model, _ = _models()
    graph = _train_graph(graph_model)
    graph(flow.tensor(x), flow.tensor(y))
    onnx_graph = graph._compiled.model.graph
    metas = graph._compiled.traced.ir.values
    constants = {init.name: numpy_helper.to_array(init) for init in onnx_graph.initializer}
    reshaped = {n.output[0]: constants[n.input[1]].tolist() for n in onnx_graph.node
                if n.op_type == "Reshape" and n.input[1] in constants}

    def shape(name):
        if name in constants:
            return constants[name].shape
        return tuple(metas[name].shape) if name in metas else reshaped.get(name)

    operands = [(n, shape(name)) for n in onnx_graph.node if n.op_type in scalars.BROADCASTING
                and shape(n.output[0]) and shape(n.output[0])[-1] == 1 for name in n.input]
    scalar_operands = [(n.name, s) for n, s in operands if s is not None and all(d == 1 for d in s)]
    assert scalar_operands  # the momentum's factor and the learning rate, at least
    assert all(len(s) == len(shape(n.output[0])) for n, s in operands if s is not None and all(d == 1 for d in s))
    read = {name for n in onnx_graph.node for name in n.input}
    assert all(init.name in read for init in onnx_graph.initializer)


def _blocked_layers(lib):
    """Convolutions whose channels fill ONNX Runtime's NCHWc blocks (8 or 16 channels)."""
    return [
        lib.Conv2d(3, 16, 3, 1, 1, bias=False), lib.BatchNorm2d(16), lib.ReLU6(),             # too few inputs
        lib.Conv2d(16, 32, 3, 1, 1, bias=False), lib.BatchNorm2d(32), lib.ReLU(),             # dense, stride 1
        lib.Conv2d(32, 32, 3, 1, 1, groups=32, bias=False), lib.BatchNorm2d(32), lib.ReLU6(),  # depthwise
        lib.Conv2d(32, 32, 3, 2, 1, groups=32, bias=False), lib.BatchNorm2d(32), lib.ReLU6(),  # depthwise, strided
        lib.Conv2d(32, 16, 3, 2, 1), lib.ReLU(),                                              # dense, strided, bias
        lib.Conv2d(16, 16, 3, 1, 2, dilation=2), lib.ReLU(),                                  # dilated
        lib.AdaptiveAvgPool2d(1), lib.Flatten(), lib.Linear(16, 5),
    ]


def _blocked_models():
    flow.manual_seed(0)
    ours = nn.Sequential(*_blocked_layers(nn))
    theirs = torch.nn.Sequential(*_blocked_layers(torch.nn))
    theirs.load_state_dict({k: torch.tensor(v.numpy().copy()) for k, v in ours.state_dict().items()})
    return ours, theirs


def test_blocked_convolutions_train_as_eager_and_pytorch():
    """On ONNX Runtime's CPU provider the eligible convolutions (forward and stride-1 input
    gradients) run as NCHWc operators, the weight reordered in the graph; losses, weights
    and running statistics stay PyTorch's, and switching the kernels off gives the same."""
    block = runtime.nchwc_block_size()
    if not block:
        pytest.skip("this ONNX Runtime build has no NCHWc kernels")
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((8, 3, 16, 16)).astype(np.float32), rng.integers(0, 5, 8)
    blocked_model, reference = _blocked_models()
    plain_model, _ = _blocked_models()
    eager_model, _ = _blocked_models()
    graph = _train_graph(blocked_model)
    blocked = [float(graph(flow.tensor(x), flow.tensor(y)).numpy()) for _ in range(STEPS)]
    nodes = graph._compiled.model.graph.node
    convs = [n for n in nodes if n.op_type == "Conv" and n.domain == "com.microsoft.nchwc"]
    # forward: dense and depthwise at stride 1, depthwise at stride 2; input gradients: the
    # stride-1 dense and depthwise ones; weight gradients: both depthwise ones (a depthwise
    # conv over batch x channels, then a sum over the batch). The first conv has 3 input
    # channels, and the last two's weights are larger than their 4x4 outputs: plain Conv.
    # With AVX2's block of 8 the batch of 8 fills a block too, so the weight gradients of
    # those last two (a convolution with the batch as its channels) run blocked as well.
    expected_blocked = {16: 7, 8: 9}[block]
    assert len(convs) == expected_blocked, [(n.name, n.domain) for n in nodes if n.op_type == "Conv"]
    plain_graph = _train_graph(plain_model)
    plain_graph.config.allow_cpu_blocked_kernels(False)
    plain = [float(plain_graph(flow.tensor(x), flow.tensor(y)).numpy()) for _ in range(STEPS)]
    assert not any(n.domain for n in plain_graph._compiled.model.graph.node)
    expected = _torch_losses(reference, x, y)
    np.testing.assert_allclose(blocked, expected, rtol=1e-4)
    np.testing.assert_allclose(plain, expected, rtol=1e-4)
    np.testing.assert_allclose(_eager_losses(eager_model, x, y), expected, rtol=1e-4)
    _assert_state_close(blocked_model, reference)
    _assert_state_close(blocked_model, eager_model)


@pytest.mark.parametrize("provider", ["openvino"])
def test_blocked_convolutions_only_on_the_cpu_provider(provider):
    """Other engines get standard ONNX: no com.microsoft.nchwc operator."""
    if not openvino.available():
        pytest.skip("OpenVINO is not installed")
    model, _ = _blocked_models()
    graph = _train_graph(model, provider)
    graph(flow.tensor(np.ones((2, 3, 12, 12), np.float32)), flow.tensor(np.zeros(2, np.int64)))
    assert not any(n.domain for n in graph._compiled.model.graph.node)
