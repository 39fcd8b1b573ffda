"""Mixed precision in nn.Graph: casts by the AMP pass, float32 master weights, dynamic
loss scaling inside the compiled step (skip on inf/nan, shrink, grow)."""

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.amp import GradScaler, StaticGradScaler
from tests.graph.helpers import TrainGraph, assert_close, data, mlp
from tests.precision import assert_close_in_format


def small_convnet(seed: int = 0) -> nn.Module:
    flow.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


def image_data(batch: int = 4):
    rng = np.random.default_rng(0)
    return (flow.tensor(rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)),
            flow.tensor(rng.integers(0, 10, size=batch).astype(np.int64)))


def _losses(model_fn, x, y, amp_dtype=None, scaler=None, steps: int = 5):
    model = model_fn()
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    if amp_dtype is not None:
        graph.config.enable_amp(True, dtype=amp_dtype)
    if scaler is not None:
        graph.set_grad_scaler(scaler)
    return np.array([float(graph(x, y).numpy()) for _ in range(steps)]), graph, model


@pytest.mark.parametrize("dtype", [flow.float16, flow.bfloat16])
def test_amp_trains_like_float32(dtype):
    x, y = image_data()
    reference, _, _ = _losses(small_convnet, x, y)
    losses, graph, model = _losses(small_convnet, x, y, dtype, GradScaler(init_scale=1024.0))
    np.testing.assert_allclose(losses, reference, atol=2e-2)
    ir = graph._last.traced.ir
    assert ir.attrs["amp"]["dtype"] == dtype.name
    low = {v.dtype for v in ir.values.values()}
    assert dtype.name in low  # values really pass through the low-precision dtype
    assert all(p.dtype == flow.float32 for p in model.parameters())  # float32 master weights


@pytest.mark.parametrize("dtype", [flow.float16, flow.bfloat16])
def test_low_precision_is_emulated_exactly_on_cpu(dtype):
    x, y = data()
    _, graph, _ = _losses(mlp, x, y, dtype, steps=1)
    ir = graph._last.traced.ir
    assert ir.attrs["amp"] == {"dtype": dtype.name, "native": False}
    producers = ir.producers()
    for n in (n for n in ir.nodes if n.op == "matmul"):  # inputs rounded through the dtype
        assert all(producers[i].op == "cast" and ir.values[producers[i].inputs[0]].dtype == dtype.name
                   for i in n.inputs), n


def test_emulated_float16_matmul_equals_torch_half_rounding():
    import torch

    model = nn.Linear(24, 8)

    class Forward(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.config.enable_amp(True, dtype=flow.float16)

        def build(self, x):
            return self.model(x)

    x = flow.randn(5, 24)
    got = Forward()(x).numpy()
    half = lambda a: torch.tensor(a).half().float()  # noqa: E731
    product = (half(x.numpy()) @ half(model.weight.numpy()).T).half().float()
    # both sum the float16 products in float32, maybe in another order: a sum on a rounding
    # boundary may round to the neighbouring float16 value, and no further
    assert_close_in_format(got, (product + torch.tensor(model.bias.numpy())).numpy(), "float16")


def test_injected_inf_skips_the_step_and_halves_the_scale():
    scaler = GradScaler(init_scale=64.0, growth_interval=2)
    x, y = data()
    model = mlp()
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    graph.set_grad_scaler(scaler)
    graph(x, y)
    assert scaler.get_scale() == 64.0
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    momentum = graph.state_dict()["model.0.weight-momentum"].numpy().copy()
    bad = x.numpy().copy()
    bad[0, 0] = np.inf
    loss = graph(flow.tensor(bad), y)
    assert not np.isfinite(loss.numpy())
    assert scaler.get_scale() == 32.0  # halved
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=f"{k} changed on a skipped step")
    np.testing.assert_array_equal(graph.state_dict()["model.0.weight-momentum"].numpy(), momentum)
    graph(x, y)
    graph(x, y)
    assert scaler.get_scale() == 64.0  # grown back after growth_interval good steps
    assert int(graph.state_dict()["System-Train-TrainStep"].numpy()) == 4


def test_scaled_training_equals_unscaled():
    x, y = data()
    plain, _, plain_model = _losses(mlp, x, y)
    scaled, _, scaled_model = _losses(mlp, x, y, scaler=StaticGradScaler(256.0))
    assert_close(scaled, plain)
    for a, b in zip(scaled_model.parameters(), plain_model.parameters()):
        assert_close(a.numpy(), b.numpy())


def test_set_grad_scaler_checks_its_argument():
    graph = TrainGraph(mlp(), flow.optim.SGD(mlp().parameters(), lr=0.1))
    with pytest.raises(flow.errors.GraphError, match="GradScaler"):
        graph.set_grad_scaler(2.0)


@pytest.mark.parametrize("dtype", [flow.float16, flow.bfloat16])
def test_saved_amp_graph_does_not_depend_on_the_tracing_machines_gpu(dtype, monkeypatch):
    """The traced (saved) IR is the same whether or not ONNX Runtime could use a GPU here."""
    import flowserve.onnx_backend.runtime as ort_runtime

    x, y = data()
    _, plain, _ = _losses(mlp, x, y, dtype, steps=1)
    monkeypatch.setattr(ort_runtime, "cuda_usable", lambda: True)
    _, with_gpu, _ = _losses(mlp, x, y, dtype, steps=1)
    ir, expected = with_gpu._last.traced.ir, plain._last.traced.ir
    assert ir.attrs["amp"] == expected.attrs["amp"] == {"dtype": dtype.name, "native": False}
    assert [(n.op, n.attrs) for n in ir.nodes] == [(n.op, n.attrs) for n in expected.nodes]
