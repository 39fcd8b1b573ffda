"""OneFlow names in nn.Graph: ``F.depend`` keeps a dependency's side effects, ``F.rrelu``,
``reshape(shape=)`` and ``Tensor.to(other)`` trace, ``nn.graph.GraphTensor`` / ``Proxy``,
``nn.Graph.trace``, global tensors as inputs of a one-process graph, and the learning-rate
log of ``ONEFLOW_DEBUG_MODE``; each gives eager mode's numbers."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
import flowserve.nn.functional as F
from flowserve.errors import GraphError
from flowserve.nn.graph import GraphModule, GraphTensor, Proxy


class _Wrap(nn.Graph):
    def __init__(self, module):
        super().__init__()
        self.m = module

    def build(self, *args):
        return self.m(*args)


class _Counting(nn.Module):
    """The dependency is an in-place update of a buffer, which nothing downstream reads."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.register_buffer("calls", flow.zeros(1))

    def forward(self, x):
        x = F.depend(x, self.calls.add_(1))
        x = F.depend(x, [x * 2, x + 2])  # dependencies without effects: pruned, no result changes
        return self.linear(x)


def test_depend_keeps_a_dependencys_side_effect_in_the_graph():
    flow.manual_seed(0)
    eager_model, graph_model = _Counting(), _Counting()
    graph_model.load_state_dict(eager_model.state_dict())
    graph = _Wrap(graph_model)
    for _ in range(3):
        x = flow.randn(2, 4)
        np.testing.assert_array_equal(graph(x).numpy(), eager_model(x).numpy())
    assert eager_model.calls.tolist() == graph_model.calls.tolist() == [3.0]


def test_rrelu_in_a_graph():
    x = flow.tensor(np.linspace(-2, 2, 40, dtype=np.float32).reshape(4, 10))
    evaluation = nn.Graph.trace(lambda t: F.rrelu(t, 0.1, 0.3, training=False))
    np.testing.assert_allclose(evaluation(x).numpy(), F.rrelu(x, 0.1, 0.3).numpy(), rtol=1e-6)
    training = nn.Graph.trace(lambda t: flow._C.rrelu(t, 0.1, 0.3, True))
    a, b = training(x).numpy(), training(x).numpy()
    neg = x.numpy() < 0
    np.testing.assert_array_equal(a[~neg], x.numpy()[~neg])
    slope = a[neg] / x.numpy()[neg]
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6 and not np.allclose(a, b)


def test_reshape_shape_keyword_and_to_other_trace():
    @nn.Graph.trace
    def f(x, like):
        return flow.reshape(x, shape=(3, 2)).to(like) + x.reshape(shape=[3, 2]).to(other=like)

    x, like = flow.tensor([0.5, 1.5, 2.5, 3.5, 4.5, 5.5]), flow.zeros(1, dtype=flow.int64)
    out = f(x, like)
    assert out.dtype == flow.int64 and out.tolist() == (x.reshape(3, 2).to(like) * 2).tolist()


def test_graph_trace_makes_a_graph_of_a_function():
    data = np.random.default_rng(0).standard_normal((4, 5, 6)).astype(np.float32)
    x = flow.tensor(data)

    @nn.Graph.trace
    def sliced():
        """Reads x from its closure."""
        return x[1:3, ..., 2:4]

    np.testing.assert_array_equal(sliced().numpy(), data[1:3, ..., 2:4])
    assert isinstance(sliced, nn.Graph) and sliced.is_compiled
    assert sliced.__name__ == "sliced" and sliced.__doc__ == "Reads x from its closure."

    @nn.Graph.trace
    def affine(a, b):
        return a @ b + 1

    a, b = flow.randn(2, 3), flow.randn(3, 2)
    np.testing.assert_allclose(affine(a, b).numpy(), (a @ b + 1).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="decorates a function"):
        nn.Graph.trace(3)


def test_graph_tensor_and_graph_module_as_oneflows():
    class Sub(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 1, 3)
            self.register_buffer("offset", flow.ones(1))

        def forward(self, x):
            return self.conv1(x) + self.offset

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = Sub()

        def forward(self, x):
            return self.layer(x)

    model = Outer()
    g = _Wrap(model)
    assert isinstance(g.m, Proxy) and isinstance(g.m.layer.conv1, Proxy)
    assert (g.m.to(GraphModule).type, g.m.to(GraphModule).name, g.m.to(GraphModule).name_prefix) == ("MODULE", "m", "")
    conv = g.m.layer.conv1.to(GraphModule)
    assert (conv.name, conv.name_prefix, conv.full_name) == ("conv1", "m.layer.", "m.layer.conv1")
    weight, offset = g.m.layer.conv1.weight, g.m.layer.offset
    assert isinstance(weight, Proxy) and weight.to(GraphTensor).type == "PARAMETER"
    assert offset.to(GraphTensor).type == "BUFFER" and offset.to(GraphTensor).name_prefix == "m.layer."
    assert weight.to(flow.Tensor) is model.layer.conv1.weight and weight.shape == (1, 1, 3, 3)
    assert g.m.layer.conv1.kernel_size == (3, 3)
    x = flow.randn(1, 1, 5, 5)
    np.testing.assert_allclose(g(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_build_reads_a_modules_parameter_through_the_graph_as_the_tensor_it_trains():
    flow.manual_seed(2)
    eager, in_graph = nn.Linear(3, 2), nn.Linear(3, 2)
    in_graph.load_state_dict(eager.state_dict())
    opt_e, opt_g = (flow.optim.SGD(m.parameters(), lr=0.5) for m in (eager, in_graph))

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = in_graph
            self.add_optimizer(opt_g)

        def build(self, x):
            loss = (flow.matmul(x, self.m.weight.t()) ** 2).mean() + (flow.tensor(self.m.weight) * x[:2]).sum()
            loss.backward()
            return loss

    graph = Train()
    assert isinstance(graph.m.weight, Proxy)  # outside build: the proxy
    for _ in range(3):
        x = flow.randn(4, 3)
        loss_e = (flow.matmul(x, eager.weight.t()) ** 2).mean() + (flow.tensor(eager.weight) * x[:2]).sum()
        opt_e.zero_grad()
        loss_e.backward()
        opt_e.step()
        np.testing.assert_allclose(graph(x).numpy(), loss_e.numpy(), rtol=1e-5)
    np.testing.assert_allclose(in_graph.weight.numpy(), eager.weight.numpy(), rtol=1e-5, atol=1e-6)


def _placement():
    return flow.placement.all("cpu")


@pytest.mark.parametrize("sbp", [flow.sbp.split(0), flow.sbp.broadcast, flow.sbp.partial_sum])
def test_global_tensor_inputs_give_eager_numbers_on_one_process(sbp):
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    local = flow.randn(6, 4)
    x = local.to_global(placement=_placement(), sbp=sbp)
    graph = _Wrap(model)
    out = graph(x)
    assert out.is_global and out.placement == _placement() and out.sbp == (flow.sbp.broadcast,)
    np.testing.assert_array_equal(out.numpy(), model(local).numpy())
    np.testing.assert_array_equal(graph(x).to_local().numpy(), model(local).numpy())  # the compiled run


def test_global_and_local_inputs_mix_and_training_steps_match_eager():
    flow.manual_seed(1)
    eager, in_graph = nn.Linear(3, 1), nn.Linear(3, 1)
    in_graph.load_state_dict(eager.state_dict())
    opt_e, opt_g = (flow.optim.SGD(m.parameters(), lr=0.1) for m in (eager, in_graph))

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = in_graph
            self.add_optimizer(opt_g)

        def build(self, x, y):
            loss = ((self.m(x) - y) ** 2).mean()
            loss.backward()
            return loss

    graph = Train()
    for step in range(3):
        x, y = flow.randn(5, 3), flow.randn(5, 1)
        loss_g = graph(x.to_global(placement=_placement(), sbp=flow.sbp.split(0)), y)
        loss_e = ((eager(x) - y) ** 2).mean()
        opt_e.zero_grad()
        loss_e.backward()
        opt_e.step()
        np.testing.assert_allclose(loss_g.numpy(), loss_e.numpy(), rtol=1e-5)
    np.testing.assert_allclose(in_graph.weight.numpy(), eager.weight.numpy(), rtol=1e-5, atol=1e-6)


def test_global_inputs_in_a_launched_run_are_refused(monkeypatch):
    x = flow.ones(2, 2).to_global(placement=_placement(), sbp=flow.sbp.broadcast)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(GraphError, match="run of 2 processes: graphs there take local tensors"):
        _Wrap(nn.Identity())(x)


def _lr_training_graph(lr_scheduler_of):
    model = nn.Linear(3, 2)
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1)
    scheduler = lr_scheduler_of(optimizer)

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = model
            self.add_optimizer(optimizer, lr_sch=scheduler)

        def build(self, x):
            out = self.m(x)
            out.mean().backward()
            return out

    return Train(), optimizer, scheduler


def _logged_lrs(path) -> list:
    lines = path.read_text().splitlines()
    assert lines[0] == "train_step,lr"
    steps, lrs = zip(*(line.split(",") for line in lines[1:]))
    assert [int(s) for s in steps] == list(range(len(steps)))
    return [float(lr) for lr in lrs]


def test_debug_mode_writes_each_steps_learning_rate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ONEFLOW_DEBUG_MODE", "True")
    graph, _, _ = _lr_training_graph(lambda opt: flow.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5))
    for _ in range(5):
        graph(flow.randn(4, 3))
    log = tmp_path / "log" / "0" / "train_step2lr.csv"
    eager_optimizer = flow.optim.SGD([nn.Parameter(flow.ones(1))], lr=0.1)
    eager_scheduler = flow.optim.lr_scheduler.StepLR(eager_optimizer, step_size=2, gamma=0.5)
    eager_lrs = []
    for _ in range(5):
        eager_lrs.append(eager_scheduler.get_last_lr()[0])
        eager_optimizer.step()
        eager_scheduler.step()
    assert _logged_lrs(log) == pytest.approx(eager_lrs) == [0.1, 0.1, 0.05, 0.05, 0.025]
    second, _, _ = _lr_training_graph(lambda opt: flow.optim.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=1))
    second(flow.randn(4, 3))
    assert _logged_lrs(log) == pytest.approx([0.05])  # a new graph starts the file afresh


def test_no_learning_rate_log_without_debug_mode(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ONEFLOW_DEBUG_MODE", raising=False)
    graph, _, _ = _lr_training_graph(lambda opt: flow.optim.lr_scheduler.StepLR(opt, step_size=1))
    graph(flow.randn(4, 3))
    assert not (tmp_path / "log").exists()


def test_symbolically_traced_module_in_a_graph_gives_eager_numbers():
    flow.manual_seed(3)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d((2, 2)), nn.Flatten(), nn.Linear(16, 3))
    model.eval()
    gm = flow.fx.symbolic_trace(model)
    graph = _Wrap(gm)
    for _ in range(2):
        x = flow.randn(2, 3, 6, 6)
        np.testing.assert_allclose(graph(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_graph_init_takes_oneflows_debug_keywords(capsys):
    class Verbose(nn.Graph):
        def __init__(self, **debug):
            super().__init__(**debug)
            self.m = nn.Linear(2, 2)

        def build(self, x):
            return self.m(x)

    Verbose(debug_v_level=1)(flow.ones(1, 2))
    out = capsys.readouterr().out
    assert "start building graph." in out and "(MODULE:m:Linear(" in out
    Verbose(debug_v_level=0, debug_ranks=[1])(flow.ones(1, 2))  # this process is rank 0: not printed
    Verbose()(flow.ones(1, 2))
    assert capsys.readouterr().out == ""
    with pytest.raises(GraphError, match="max verbose debug info level is 3"):
        Verbose(debug_v_level=4)
