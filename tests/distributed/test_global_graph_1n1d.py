"""A module made global with ``to_global`` and trained in an ``nn.Graph`` in one process, as
OneFlow's 1n1d global graph tests do: the graph gives eager global training's numbers (which
are local training's), the parameters stay global Parameters, ``state_dict()``, a saved state
dict and ``flow.save(graph)`` work; in a launched run the graph refuses global tensors with
one message."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import GraphError
from tests.distributed.helpers import check as check_run
from tests.distributed.helpers import launch

RNG = np.random.default_rng(0)
X, Y = RNG.standard_normal((8, 3)).astype(np.float32), RNG.standard_normal((8, 2)).astype(np.float32)
STEPS = 3


def _placement():
    return flow.placement(type="cpu", ranks=[0])


def _model(batch_norm: bool):
    flow.manual_seed(0)
    if batch_norm:
        return nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))  # no bias before the norm
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _loss(model, x, y):
    return ((model(x) - y) ** 2).mean()


class Train(nn.Graph):
    def __init__(self, model, opt, clip: bool):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.clip = clip

    def build(self, x, y):
        loss = _loss(self.model, x, y)
        loss.backward()
        if self.clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
        return loss


def _data_parallel(model) -> None:
    model.to_global(placement=_placement(), sbp=flow.sbp.broadcast)


def _model_parallel(model) -> None:  # the split MLP of docs/distributed.md
    model[0].to_global(_placement(), flow.sbp.split(0))
    model[2].to_global(_placement(), lambda t: flow.sbp.split(1) if t.ndim == 2 else flow.sbp.broadcast)


CASES = {  # name -> (optimizer, how the model becomes global, input sbp, batch norm, clip_grad_norm_ in build)
    "sgd-broadcast-split-batch": (lambda ps: flow.optim.SGD(ps, lr=0.1, momentum=0.9), _data_parallel,
                                  flow.sbp.split(0), False, False),
    "adam-broadcast-batchnorm-clip": (lambda ps: flow.optim.Adam(ps, lr=0.05), _data_parallel,
                                      flow.sbp.broadcast, True, True),
    "adamw-split-weights": (lambda ps: flow.optim.AdamW(ps, lr=0.05), _model_parallel, flow.sbp.broadcast,
                            False, False),
}


def _train(case: str, mode: str, steps: int = STEPS, state=None):
    """``mode``: local (eager), eager (global), graph (global); returns losses, model, optimizer, graph."""
    make_opt, make_global, input_sbp, batch_norm, clip = CASES[case]
    model = _model(batch_norm)
    x, y = flow.tensor(X), flow.tensor(Y)
    if mode != "local":
        make_global(model)
        x, y = x.to_global(placement=_placement(), sbp=input_sbp), y.to_global(_placement(), flow.sbp.broadcast)
    opt = make_opt(model.parameters())
    graph = Train(model, opt, clip) if mode == "graph" else None
    if state is not None:
        graph.load_state_dict(state)
    losses = []
    for _ in range(steps):
        if graph is not None:
            loss = graph(x, y)
        else:
            opt.zero_grad()
            loss = _loss(model, x, y)
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
        losses.append(loss.numpy())
    return losses, model, opt, graph


def _close(actual, expected, what: str) -> None:
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(expected).max())),
                               err_msg=what)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_global_module_trains_in_a_graph_as_in_eager_mode(case):
    local_losses, local_model, _, _ = _train(case, "local")
    eager_losses, eager_model, eager_opt, _ = _train(case, "eager")
    graph_losses, model, opt, graph = _train(case, "graph")
    _close(np.array(eager_losses), np.array(local_losses), "eager global losses")
    _close(np.array(graph_losses), np.array(eager_losses), "graph losses")
    expected = {k: v.numpy() for k, v in eager_model.state_dict().items()}
    for name, tensor in model.state_dict().items():
        assert tensor.is_global and tensor.placement == _placement(), name
        assert tensor.sbp == dict(eager_model.state_dict().items())[name].sbp, name
        _close(tensor.numpy(), expected[name], name)
        _close(tensor.numpy(), local_model.state_dict()[name].numpy(), name)
    params = list(model.parameters())
    assert all(isinstance(p, nn.Parameter) and p.is_global and p.is_leaf and p.requires_grad for p in params)
    assert all(p.grad is None for p in params)  # a graph step leaves no eager gradient
    for p, q in zip(params, eager_model.parameters()):
        for key, value in opt.state[p].items():
            reference = eager_opt.state[q][key]
            assert value.is_global == reference.is_global, key
            _close(value.numpy(), reference.numpy(), key)


def test_the_loss_of_a_global_graph_is_global():
    losses, model, _, graph = _train("sgd-broadcast-split-batch", "graph", steps=1)
    x = flow.tensor(X).to_global(placement=_placement(), sbp=flow.sbp.split(0))
    loss = graph(x, flow.tensor(Y).to_global(placement=_placement(), sbp=flow.sbp.broadcast))
    assert loss.is_global and loss.placement == _placement() and loss.shape == ()
    assert model[0].weight.sbp == (flow.sbp.broadcast,)


def test_state_dict_of_a_global_graph_resumes_training(tmp_path):
    whole, whole_model, _, _ = _train("adam-broadcast-batchnorm-clip", "graph", steps=5)
    _, _, _, graph = _train("adam-broadcast-batchnorm-clip", "graph", steps=2)
    state = graph.state_dict()
    assert state["model"]["1.weight"].is_global and state["model.1.weight-m"].is_global
    assert int(state["System-Train-TrainStep"].numpy()) == 2
    flow.save(state, tmp_path / "state")
    resumed, model, _, _ = _train("adam-broadcast-batchnorm-clip", "graph", steps=3,
                                  state=flow.load(tmp_path / "state"))
    _close(np.array(resumed), np.array(whole[2:]), "losses after resuming")
    for name, tensor in model.state_dict().items():
        assert tensor.is_global, name
        _close(tensor.numpy(), whole_model.state_dict()[name].numpy(), name)


def test_a_saved_global_graph_loads_and_gives_the_modules_numbers(tmp_path):
    _, model, _, graph = _train("adam-broadcast-batchnorm-clip", "graph")
    flow.save(graph, tmp_path / "graph", model=graph.model)
    loaded = flow.load(tmp_path / "graph")
    model.eval()
    x = flow.tensor(X)
    expected = model(x.to_global(placement=_placement(), sbp=flow.sbp.broadcast)).numpy()
    _close(loaded(x).numpy(), expected, "loaded graph")


def test_a_captured_eager_global_tensor_is_still_refused():
    weight = flow.ones(3, 2, placement=_placement(), sbp=flow.sbp.broadcast)

    class Captures(nn.Graph):
        def build(self, x):
            return x @ weight

    with pytest.raises(GraphError, match="global ones only as inputs or as parameters and buffers"):
        Captures()(flow.ones(4, 3).to_global(placement=_placement(), sbp=flow.sbp.broadcast))


def test_in_a_launched_run_a_graph_refuses_global_modules_and_inputs_with_one_message(tmp_path):
    check_run(launch("global_graph.py", tmp_path, nproc=2, wall_s=180))
    ranks = [(tmp_path / f"rank{rank}.txt").read_text().splitlines() for rank in range(2)]
    for local_input, global_input, eager in ranks:
        for line, size in ((local_input, "(2, 3)"), (global_input, "(8, 3)")):
            assert line.startswith(f"a global tensor (size {size}, sbp ")
            assert "in a run of 2 processes: graphs there take local tensors and modules" in line
        assert eager.startswith("eager ")  # the eager global model still trains after the refusals
    assert ranks[0][2] == ranks[1][2]
