"""Training with global tensors as OneFlow users do: ``nn.Module.to_global``, optimizers and
``clip_grad_norm_`` on global parameters, in-place ops, ``grad_sbp``; data parallel (broadcast
parameters, split(0) batch) and model parallel (split weights) training equals the same
model trained in one process on the whole batch, in one process and in two on loopback."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import DistributedError
from tests.distributed.global_training import check, run
from tests.distributed.helpers import check as check_run
from tests.distributed.helpers import launch


def test_global_training_in_one_process_matches_local_training():
    check([run(0, 1)], world=1)


def test_global_training_over_two_processes_matches_single_process_training(tmp_path):
    check_run(launch("global_training.py", tmp_path, nproc=2, wall_s=180))
    check([dict(np.load(tmp_path / f"rank{rank}.npz")) for rank in range(2)], world=2)


def test_module_to_global_keeps_parameters_registered_and_shared():
    pl = flow.placement.all("cpu")
    flow.manual_seed(0)
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.ReLU(), shared, nn.BatchNorm1d(3))
    local = {k: v.numpy() for k, v in model.state_dict().items()}
    assert model.to_global(placement=pl, sbp=flow.sbp.broadcast) is model
    params = list(model.parameters())
    assert len(params) == 4 and all(isinstance(p, nn.Parameter) and p.is_global and p.is_leaf for p in params)
    assert model[0].weight is model[2].weight  # a tied weight stays one parameter
    assert model[3].running_mean.is_global and not isinstance(model[3].running_mean, nn.Parameter)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), local[k])
    p = nn.Parameter(flow.ones(4, 2)).to_global(placement=pl, sbp=flow.sbp.split(0))
    assert isinstance(p, nn.Parameter) and p.requires_grad and p.is_leaf
    q = p.to_global(sbp=flow.sbp.broadcast)
    assert isinstance(q, nn.Parameter) and q.is_leaf and q.sbp == (flow.sbp.broadcast,)
    assert "Parameter containing" in repr(q) and "sbp=(flowserve.sbp.broadcast,)" in repr(q)
    model.to_global(sbp=lambda t: flow.sbp.split(0) if t.ndim == 2 else flow.sbp.broadcast)
    assert model[0].weight.sbp == (flow.sbp.split(0),) and model[0].bias.sbp == (flow.sbp.broadcast,)
    twin = copy.deepcopy(model)
    w = twin[0].weight
    assert isinstance(w, nn.Parameter) and w is twin[2].weight and w is not model[0].weight and w.is_leaf
    assert w.sbp == (flow.sbp.split(0),) and w.requires_grad
    np.testing.assert_array_equal(w.numpy(), model[0].weight.numpy())


def test_a_broadcast_leaf_gradient_is_broadcast_and_zeros_like_stays_global():
    pl = flow.placement.all("cpu")
    w = flow.ones(3, 2, placement=pl, sbp=flow.sbp.broadcast, requires_grad=True)
    x = flow.ones(4, 3, placement=pl, sbp=flow.sbp.split(0))
    (x @ w).sum().backward()
    assert w.grad.sbp == (flow.sbp.broadcast,)
    np.testing.assert_array_equal(w.grad.numpy(), np.full((3, 2), 4.0))
    for make in (flow.zeros_like, flow.ones_like, lambda t: flow.full_like(t, 2.0), flow.randn_like):
        z = make(x)
        assert z.is_global and z.sbp == x.sbp and z.shape == x.shape


@pytest.mark.parametrize("make,message", [
    (lambda pl: flow.ones(4, placement=pl, sbp=flow.sbp.broadcast).add_(
        flow.ones(4, placement=pl, sbp=flow.sbp.split(0))),
     r"in-place update of a global tensor of sbp \(flowserve.sbp.broadcast,\): the result has sbp "
     r"\(flowserve.sbp.split\(dim=0\),\), and an in-place op keeps the tensor's sbp"),
    (lambda pl: flow.ones(4, 3, placement=pl, sbp=flow.sbp.split(0)).to_global(
        sbp=flow.sbp.broadcast, grad_sbp=flow.sbp.split(3)), r"split\(dim=3\) needs a tensor with more than 3 dims"),
    (lambda pl: nn.Linear(2, 2).to_global(placement=pl), "Module.to_global needs sbp="),
    (lambda pl: nn.Linear(2, 2).to_global(sbp=flow.sbp.broadcast), "needs placement="),
    (lambda pl: nn.Parameter(flow.ones(2, placement=pl, sbp=flow.sbp.broadcast)), "convert the parameter instead"),
    (lambda pl: flow.optim.Adam(nn.Linear(2, 2).to_global(pl, flow.sbp.partial_sum).parameters()),
     r"Adam: a parameter of size \(2, 2\) is a partial_sum global tensor; an update is not linear"),
])
def test_global_training_mistakes_say_what_was_expected(make, message):
    with pytest.raises((DistributedError, TypeError), match=message):
        make(flow.placement.all("cpu"))


def test_addcmul_addcdiv_lerp_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3))
    for name, args, kwargs in [("addcmul", (b, c), {"value": 0.3}), ("addcdiv", (b, np.abs(c) + 1), {"value": -2.0}),
                               ("lerp", (b, 0.3), {}), ("lerp", (b, 0.7), {})]:
        mine, theirs = flow.tensor(a), torch.tensor(a)
        getattr(mine, name + "_")(*[flow.tensor(x) if isinstance(x, np.ndarray) else x for x in args], **kwargs)
        getattr(theirs, name + "_")(*[torch.tensor(x) if isinstance(x, np.ndarray) else x for x in args], **kwargs)
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)
        out = getattr(flow.tensor(a), name)(*[flow.tensor(x) if isinstance(x, np.ndarray) else x for x in args],
                                            **kwargs)
        np.testing.assert_allclose(out.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)


def test_optimizer_state_of_global_parameters_saves_and_loads():
    pl = flow.placement.all("cpu")
    flow.manual_seed(0)
    model = nn.Linear(4, 3).to_global(pl, lambda t: flow.sbp.split(0))
    opt = flow.optim.Adam(model.parameters(), lr=0.1)
    x = flow.randn(5, 4, placement=pl, sbp=flow.sbp.broadcast)
    model(x).square().sum().backward()
    opt.step()
    state = opt.state_dict()
    assert state["state"][0]["exp_avg"].is_global and state["state"][0]["exp_avg"].sbp == (flow.sbp.split(0),)
    fresh = flow.optim.Adam(model.parameters(), lr=0.1)
    fresh.load_state_dict(state)
    for key in ("exp_avg", "exp_avg_sq", "step"):
        np.testing.assert_array_equal(fresh.state[model.weight][key].numpy(), state["state"][0][key].numpy())
    assert fresh.state[model.weight]["exp_avg"].sbp == (flow.sbp.split(0),)
    opt.zero_grad(set_to_none=False)
    assert model.weight.grad.sbp == (flow.sbp.split(0),) and not model.weight.grad.numpy().any()
