"""nn.Graph on a CUDA GPU: the session is ONNX Runtime's CUDA provider, parameters and
optimizer state stay on the device between steps (CuPy arrays the eager tensors hold),
and the numbers are eager mode's: training, mixing eager updates with graph steps,
``state_dict()``, inference, and a saved graph served from the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from tests.gpu import needs_cupy, needs_ort_cuda
from tests.precision import assert_close_in_format
from tests.graph.helpers import ForwardGraph, TrainGraph, assert_close, data, eager_steps, make_optimizer, mlp

pytestmark = [pytest.mark.gpu, needs_cupy, needs_ort_cuda]
STEPS = 4


def _on_gpu(t) -> bool:
    return t.device == flow.device("cuda:0") and type(t._data).__module__.startswith("cupy")


def _cuda_data(**kwargs):
    x, y = data(**kwargs)
    return x.to("cuda"), y.to("cuda")


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_training_on_cuda_equals_eager_and_keeps_state_on_the_device(kind):
    eager_model, graph_model = mlp().to("cuda"), mlp().to("cuda")
    eager_opt, graph_opt = make_optimizer(kind, eager_model.parameters()), make_optimizer(kind, graph_model.parameters())
    x, y = _cuda_data()
    expected = eager_steps(eager_model, eager_opt, None, x, y, STEPS)
    graph = TrainGraph(graph_model, graph_opt)
    losses = [graph(x, y) for _ in range(STEPS)]
    assert all(_on_gpu(loss) for loss in losses)  # the loss comes back only when read
    assert graph._parts.last.session.get_providers()[0] == "CUDAExecutionProvider"
    assert_close([loss.numpy() for loss in losses], expected, what="losses")
    for (name, p), (_, q) in zip(graph_model.named_parameters(), eager_model.named_parameters()):
        assert _on_gpu(p), name
        assert_close(p.numpy(), q.numpy(), what=name)
    held = graph._parts.last.state  # parameters and optimizer state, as the graph runs them
    # (the learning rate is fed from the optimizer's group each call: a host scalar)
    floats = {name: t for name, t in held.items() if t.dtype.is_floating_point and not name.startswith("System-")}
    assert len(floats) > len(list(graph_model.parameters()))  # momentum / Adam moments as well
    assert all(_on_gpu(t) for t in floats.values()), [n for n, t in floats.items() if not _on_gpu(t)]


def test_eager_updates_between_graph_steps_are_seen_on_cuda():
    eager_model, graph_model = mlp().to("cuda"), mlp().to("cuda")
    eager_opt, graph_opt = make_optimizer("sgd", eager_model.parameters()), make_optimizer("sgd", graph_model.parameters())
    x, y = _cuda_data()
    graph = TrainGraph(graph_model, graph_opt)
    for step in range(3):
        eager_steps(eager_model, eager_opt, None, x, y, 1)
        graph(x, y)
        with flow.no_grad():  # an eager edit of a parameter the graph holds on the device
            for model in (eager_model, graph_model):
                model[0].weight.mul_(0.5 + step)
    for (name, p), (_, q) in zip(graph_model.named_parameters(), eager_model.named_parameters()):
        assert_close(p.numpy(), q.numpy(), what=name)
    host = {k: v.numpy() for k, v in graph_model.state_dict().items()}
    reloaded = mlp(seed=5)
    reloaded.load_state_dict({k: flow.tensor(v) for k, v in host.items()})
    assert_close(reloaded(x.cpu()).numpy(), graph_model(x).numpy(), what="state_dict on the CPU")


def test_inference_graph_on_cuda_equals_eager_and_saves(tmp_path):
    flow.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5)).to("cuda").eval()
    x = flow.tensor(np.random.default_rng(2).standard_normal((4, 3, 16, 16)).astype(np.float32), device="cuda")
    graph = ForwardGraph(model)
    got = graph(x)
    assert _on_gpu(got)
    assert_close(got.numpy(), model(x).numpy(), what="inference")
    flow.save(graph, tmp_path / "saved")
    loaded = flow.load(tmp_path / "saved")
    assert_close(loaded(x.cpu()).numpy(), got.numpy(), what="saved and loaded on the CPU")


def test_a_graph_follows_its_tensors_device():
    """A module on the CPU runs on the CPU provider even where a GPU is usable."""
    x, _ = data()
    graph = ForwardGraph(mlp().eval())
    graph(x)
    assert graph._parts.last.session.get_providers()[0] == "CPUExecutionProvider"
    model = mlp().eval().to("cuda")
    graph = ForwardGraph(model)
    out = graph(x.to("cuda"))
    assert _on_gpu(out) and graph._parts.last.session.get_providers()[0] == "CUDAExecutionProvider"


def test_dynamic_batch_on_cuda():
    model = mlp().eval().to("cuda")
    graph = ForwardGraph(model)
    for batch in (8, 3, 8):
        x = flow.tensor(np.random.default_rng(batch).standard_normal((batch, 12)).astype(np.float32), device="cuda")
        assert_close(graph(x).numpy(), model(x).numpy(), what=f"batch {batch}")


def _convnet(seed: int = 0) -> nn.Module:
    flow.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4))


def _images(batch: int = 8, seed: int = 3):
    rng = np.random.default_rng(seed)
    return (flow.tensor(rng.standard_normal((batch, 3, 12, 12)).astype(np.float32)),
            flow.tensor(rng.integers(0, 4, batch).astype(np.int64)))


def test_convnet_training_on_cuda_equals_eager_on_the_cpu():
    """Convolutions (grouped too), batch norm in training mode, pooling: forward and
    backward lowered for the CUDA provider give the CPU eager numbers."""
    x, y = _images()
    eager_model, graph_model = _convnet(), _convnet().to("cuda")
    eager_opt = flow.optim.SGD(eager_model.parameters(), lr=0.1, momentum=0.9)
    graph = TrainGraph(graph_model, flow.optim.SGD(graph_model.parameters(), lr=0.1, momentum=0.9))
    expected = eager_steps(eager_model, eager_opt, None, x, y, STEPS)
    losses = [graph(x.to("cuda"), y.to("cuda")).numpy() for _ in range(STEPS)]
    assert_close(losses, expected, rtol=1e-4, what="losses")
    for (name, p), (_, q) in zip(graph_model.state_dict().items(), eager_model.state_dict().items()):
        assert _on_gpu(p), name
        assert_close(p.numpy(), q.numpy(), rtol=1e-4, what=name)  # running stats too


def test_amp_graph_on_cuda_gives_the_cpu_graphs_numbers():
    """AMP's emulated form is the same computation on both providers: equal up to a
    float16 rounding of the output's scale (float32 sums in another order may round a
    value to its neighbour)."""
    x, y = _images()
    losses = {}
    for device in ("cpu", "cuda"):
        model = _convnet().to(device)
        graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1))
        graph.config.enable_amp(True, dtype=flow.float16)
        losses[device] = [float(graph(x.to(device), y.to(device)).numpy()) for _ in range(2)]
    assert_close_in_format(losses["cuda"], losses["cpu"], "float16", roundings=4)
