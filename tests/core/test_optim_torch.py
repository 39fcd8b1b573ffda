"""Optimizers and LR schedulers against PyTorch 2.13 where OneFlow's rule and PyTorch's
agree: the same small model with copied weights, trained on the same batches, holds the
same parameters after 20 steps; state dicts round-trip and load across the two frameworks.
Where OneFlow differs (SGD's dampening and maximize with weight decay, RMSprop's eps, AdamW's
default weight decay), ``test_optim_oneflow.py`` checks OneFlow's formula."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import flowserve as flow

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests (pip install torch==2.13.0)")

RTOL = 1e-5
STEPS = 20

OPTIMIZERS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02)),
    ("SGD", dict(lr=0.05, momentum=0.9, maximize=True)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)),
    ("Adam", dict(lr=1e-2, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=1e-2, weight_decay=1e-2)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    # eps=0: OneFlow's sqrt(v + eps) and PyTorch's sqrt(v) + eps agree
    ("RMSprop", dict(lr=1e-2, eps=0.0)),
    ("RMSprop", dict(lr=1e-2, eps=0.0, centered=True, weight_decay=0.01)),
    ("RMSprop", dict(lr=1e-3, eps=0.0, momentum=0.9, centered=True, alpha=0.9, maximize=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.01, initial_accumulator_value=0.1)),
    ("Adadelta", dict(lr=1.0)),
    ("Adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.01, maximize=True)),
    ("Adamax", dict(lr=1e-2)),
    ("Adamax", dict(lr=1e-2, betas=(0.8, 0.95), weight_decay=0.02)),
    ("NAdam", dict(lr=1e-2)),
    ("NAdam", dict(lr=1e-2, weight_decay=0.05, momentum_decay=8e-3, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=1e-2)),
    ("RAdam", dict(lr=1e-2, betas=(0.8, 0.9), weight_decay=0.05, decoupled_weight_decay=True)),
]


def _ids(cases):
    return [name + "-" + ",".join(f"{k}={v}" for k, v in kw.items()) for name, kw in cases]


def make_pair(seed: int = 0):
    """A flowserve MLP and a PyTorch MLP holding the same weights."""
    flow.manual_seed(seed)
    ours = flow.nn.Sequential(flow.nn.Linear(5, 8), flow.nn.Tanh(), flow.nn.Linear(8, 3))
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        for (_, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
            q.copy_(torch.from_numpy(p.numpy().copy()))
    return ours, theirs


def batches(n: int = STEPS, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32))
            for _ in range(n)]


def train_ours(model, opt, data, sched=None):
    for x, y in data:
        opt.zero_grad()
        flow.nn.functional.mse_loss(model(flow.tensor(x)), flow.tensor(y)).backward()
        opt.step()
        if sched is not None:
            sched.step()


def train_theirs(model, opt, data, sched=None):
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt.step()
        if sched is not None:
            sched.step()


def assert_same_params(ours, theirs):
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        ref = q.detach().numpy()
        np.testing.assert_allclose(p.numpy(), ref, rtol=RTOL, atol=RTOL * np.abs(ref).max(), err_msg=name)


@pytest.mark.parametrize("name,options", OPTIMIZERS, ids=_ids(OPTIMIZERS))
def test_optimizer_matches_torch_after_20_steps(name, options):
    ours, theirs = make_pair()
    data = batches()
    train_ours(ours, getattr(flow.optim, name)(ours.parameters(), **options), data)
    train_theirs(theirs, getattr(torch.optim, name)(theirs.parameters(), foreach=False, **options), data)
    assert_same_params(ours, theirs)


def test_parameter_groups_with_their_own_options():
    ours, theirs = make_pair()
    data = batches()
    groups = lambda m: [{"params": m[0].parameters(), "lr": 0.02},  # noqa: E731
                        {"params": m[2].parameters(), "momentum": 0.5}]
    train_ours(ours, flow.optim.SGD(groups(ours), lr=0.1, momentum=0.9), data)
    train_theirs(theirs, torch.optim.SGD(groups(theirs), lr=0.1, momentum=0.9), data)
    assert_same_params(ours, theirs)


# -- state dicts ---------------------------------------------------------------------------


def to_torch_state(sd: dict) -> dict:
    state = {i: {k: torch.from_numpy(v.numpy().copy()) for k, v in s.items()} for i, s in sd["state"].items()}
    return {"state": state, "param_groups": copy.deepcopy(sd["param_groups"])}


def to_flow_state(sd: dict) -> dict:
    state = {i: {k: flow.tensor(v.numpy().copy()) for k, v in s.items()} for i, s in sd["state"].items()}
    return {"state": state, "param_groups": copy.deepcopy(sd["param_groups"])}


ROUND_TRIP = [("SGD", dict(lr=0.05, momentum=0.9)), ("Adam", dict(lr=1e-2, amsgrad=True)),
              ("AdamW", dict(lr=1e-2, weight_decay=1e-2)),
              ("RMSprop", dict(lr=1e-2, eps=0.0, momentum=0.5, centered=True)),
              ("Adagrad", dict(lr=0.1, lr_decay=0.01))]


@pytest.mark.parametrize("name,options", ROUND_TRIP, ids=_ids(ROUND_TRIP))
def test_state_dict_layout_and_round_trips(name, options):
    data = batches()
    ours, theirs = make_pair()
    opt = getattr(flow.optim, name)(ours.parameters(), **options)
    topt = getattr(torch.optim, name)(theirs.parameters(), foreach=False, **options)
    train_ours(ours, opt, data[:10])
    train_theirs(theirs, topt, data[:10])
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["state"].keys() == tsd["state"].keys()
    assert [s.keys() for s in sd["state"].values()] == [s.keys() for s in tsd["state"].values()]
    assert [g["params"] for g in sd["param_groups"]] == [g["params"] for g in tsd["param_groups"]]
    # torch's state into flowserve, flowserve's into torch: both keep training in step
    resumed, tresumed = make_pair()
    with torch.no_grad():
        for (_, p), (_, q), (_, t) in zip(resumed.named_parameters(), ours.named_parameters(),
                                          tresumed.named_parameters()):
            p.data = q.detach().clone()
            t.copy_(torch.from_numpy(q.numpy().copy()))
    opt2 = getattr(flow.optim, name)(resumed.parameters(), **options)
    opt2.load_state_dict(to_flow_state(tsd))
    topt2 = getattr(torch.optim, name)(tresumed.parameters(), foreach=False, **options)
    topt2.load_state_dict(to_torch_state(sd))
    train_ours(resumed, opt2, data[10:])
    train_theirs(tresumed, topt2, data[10:])
    train_theirs(theirs, topt, data[10:])
    assert_same_params(resumed, theirs)
    assert_same_params(resumed, tresumed)


def test_load_state_dict_names_the_mismatch():
    ours, _ = make_pair()
    opt = flow.optim.Adam(ours.parameters())
    other = flow.optim.Adam(list(ours.parameters())[:2])
    with pytest.raises(flow.errors.FlowserveError, match="parameter group 0 has 4 parameters"):
        opt.load_state_dict(other.state_dict())


def test_argument_checks_use_torch_messages():
    params = list(make_pair()[0].parameters())
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        flow.optim.Adam(params, lr=-1)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        flow.optim.AdamW(params, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="more than one parameter group"):
        flow.optim.SGD([{"params": params}, {"params": params[:1]}], lr=0.1)


# -- LR schedulers -------------------------------------------------------------------------


def _schedulers(mod, opt):
    return {
        "StepLR": lambda: mod.StepLR(opt, step_size=3, gamma=0.5),
        "MultiStepLR": lambda: mod.MultiStepLR(opt, milestones=[2, 5, 5, 11], gamma=0.3),
        "ExponentialLR": lambda: mod.ExponentialLR(opt, gamma=0.9),
        "CosineAnnealingLR": lambda: mod.CosineAnnealingLR(opt, T_max=7, eta_min=1e-3),
        "LambdaLR": lambda: mod.LambdaLR(opt, lambda e: 1.0 / (1 + e)),
        "LinearLR": lambda: mod.LinearLR(opt, start_factor=0.2, end_factor=0.9, total_iters=6),
        "ConstantLR": lambda: mod.ConstantLR(opt, factor=0.5, total_iters=4),
        "PolynomialLR": lambda: mod.PolynomialLR(opt, total_iters=9, power=2.0),
        "CosineAnnealingWarmRestarts": lambda: mod.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=1e-3),
        "SequentialLR": lambda: mod.SequentialLR(
            opt, [mod.LinearLR(opt, start_factor=0.1, total_iters=4), mod.CosineAnnealingLR(opt, T_max=10)],
            milestones=[4]),
    }


def _lrs_over(sched, opt, steps: int):
    lrs = [sched.get_last_lr()]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr())
    return np.array(lrs, dtype=np.float64)


@pytest.mark.parametrize("kind", list(_schedulers(flow.optim.lr_scheduler, None)))
def test_scheduler_lrs_match_torch(kind):
    ours, theirs = make_pair()
    groups = lambda m: [{"params": m[0].parameters()}, {"params": m[2].parameters(), "lr": 0.05}]  # noqa: E731
    opt = flow.optim.SGD(groups(ours), lr=0.1)
    topt = torch.optim.SGD(groups(theirs), lr=0.1)
    sched = _schedulers(flow.optim.lr_scheduler, opt)[kind]()
    tsched = _schedulers(torch.optim.lr_scheduler, topt)[kind]()
    np.testing.assert_allclose(_lrs_over(sched, opt, 25), _lrs_over(tsched, topt, 25), rtol=1e-12)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([g["lr"] for g in topt.param_groups])
    # state dict: torch's loads into flowserve (and back); both continue identically
    sd, tsd = sched.state_dict(), tsched.state_dict()
    assert set(sd) == set(tsd) - {"_get_lr_called_within_step"}
    fresh_opt = flow.optim.SGD(groups(ours), lr=0.1)
    fresh = _schedulers(flow.optim.lr_scheduler, fresh_opt)[kind]()
    fresh_opt.load_state_dict(to_flow_state(topt.state_dict()))
    fresh.load_state_dict(copy.deepcopy(tsd))
    np.testing.assert_allclose(_lrs_over(fresh, fresh_opt, 5), _lrs_over(tsched, topt, 5), rtol=1e-12)


def test_scheduler_trains_like_torch():
    ours, theirs = make_pair()
    data = batches()
    opt = flow.optim.AdamW(ours.parameters(), lr=2e-2, weight_decay=1e-2)
    topt = torch.optim.AdamW(theirs.parameters(), lr=2e-2, weight_decay=1e-2, foreach=False)
    mk = lambda mod, o: mod.SequentialLR(  # noqa: E731
        o, [mod.LinearLR(o, start_factor=0.25, total_iters=5), mod.ExponentialLR(o, gamma=0.9)], [5])
    train_ours(ours, opt, data, mk(flow.optim.lr_scheduler, opt))
    train_theirs(theirs, topt, data, mk(torch.optim.lr_scheduler, topt))
    assert_same_params(ours, theirs)


def test_step_with_epoch_uses_the_closed_form():
    opt = flow.optim.SGD(make_pair()[0].parameters(), lr=0.1)
    topt = torch.optim.SGD(make_pair()[1].parameters(), lr=0.1)
    sched = flow.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    tsched = torch.optim.lr_scheduler.StepLR(topt, step_size=3, gamma=0.5)
    with pytest.warns(UserWarning):
        tsched.step(7)
    sched.step(7)
    assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr())
    assert sched.last_epoch == 7


def test_lambda_lr_keeps_lambdas_out_of_its_state_dict():
    opt = flow.optim.SGD(make_pair()[0].parameters(), lr=0.1)
    sched = flow.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5**e)
    sd = sched.state_dict()
    assert sd["lr_lambdas"] == [None] and "optimizer" not in sd


def test_resuming_without_initial_lr_is_refused():
    opt = flow.optim.SGD(make_pair()[0].parameters(), lr=0.1)
    with pytest.raises(KeyError, match="initial_lr"):
        flow.optim.lr_scheduler.StepLR(opt, step_size=2, last_epoch=3)


def test_multistep_state_dict_survives_plain_dicts():
    opt = flow.optim.SGD(make_pair()[0].parameters(), lr=0.1)
    sched = flow.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 4])
    sd = {**sched.state_dict(), "milestones": dict(sched.milestones)}  # as JSON-like storage gives it back
    sched.load_state_dict(sd)
    sched.step(5)
    assert sched.get_last_lr() == pytest.approx([0.1 * 0.1**2])
