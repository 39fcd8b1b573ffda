"""Where OneFlow's optimizers differ from PyTorch's, flowserve's eager steps follow OneFlow's
rule (``oneflow_optim_formulas``, numpy in float64): Adam/AdamW's ``do_bias_correction``,
RMSprop's eps inside the square root, SGD's damped first step, Nesterov with dampening and
``maximize`` negating the decay term too, LAMB, and ``CosineAnnealingWarmRestarts``'s
``decay_rate``/``restart_limit``. SGD and Adam/AdamW run both eager paths (``foreach``)."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
from tests.core import oneflow_optim_formulas as oneflow

SHAPES = [(3, 4), (5,)]
STEPS = 4


def values(seed: int = 0, steps: int = STEPS, zero_first: bool = False):
    rng = np.random.default_rng(seed)
    params = [rng.uniform(-1, 1, s).astype(np.float32) for s in SHAPES]
    if zero_first:
        params[0][:] = 0  # LAMB's trust ratio is 1 for a parameter of norm 0
    grads = [[rng.uniform(-1, 1, s).astype(np.float32) for s in SHAPES] for _ in range(steps)]
    return params, grads


def train(name, options, params, grads):
    """Eager steps on parameters given gradients; the parameters after every step."""
    ps = [flow.nn.Parameter(flow.tensor(p.copy())) for p in params]
    opt = getattr(flow.optim, name)(ps, **options)
    history = []
    for step_grads in grads:
        for p, g in zip(ps, step_grads):
            p.grad = flow.tensor(g.copy())
        opt.step()
        history.append([p.numpy().copy() for p in ps])
    return history, opt


def expected(rule, options, params, grads):
    """``rule`` per parameter, as a list of steps of parameters."""
    per_param = [rule(p, [step[i] for step in grads], **options) for i, p in enumerate(params)]
    return [list(step) for step in zip(*per_param)]


def assert_steps_close(actual, reference, rtol=1e-5):
    for i, (ours, theirs) in enumerate(zip(actual, reference, strict=True)):
        for j, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(np.abs(b).max(), 1e-3),
                                       err_msg=f"parameter {j} after step {i + 1}")


def _ids(cases):
    return [f"{name}-" + ",".join(f"{k}={v}" for k, v in kw.items()) for name, kw in cases]


# (flowserve optimizer, its options, OneFlow's rule, the rule's options)
ADAM = [
    ("Adam", dict(lr=1.0, do_bias_correction=False)),
    ("Adam", dict(lr=0.1, betas=(0.8, 0.9), do_bias_correction=False, weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=1.0, do_bias_correction=False)),
    ("AdamW", dict(lr=0.1, do_bias_correction=False, weight_decay=0.1, amsgrad=True)),
]
SGD = [
    dict(lr=0.1, momentum=0.9, dampening=0.5),
    dict(lr=1.0, momentum=0.8, dampening=0.3, weight_decay=0.1),
    dict(lr=0.1, momentum=0.9, dampening=0.5, nesterov=True),
    dict(lr=1.0, momentum=0.9, dampening=0.2, nesterov=True, weight_decay=0.1, maximize=True),
    dict(lr=1.0, momentum=0.9, weight_decay=0.5, maximize=True),
    dict(lr=1.0, weight_decay=0.5, maximize=True),
]
RMSPROP = [
    dict(lr=0.1, eps=1e-2),
    dict(lr=1.0, alpha=0.9, eps=0.1, weight_decay=0.1),
    dict(lr=0.1, eps=1e-2, centered=True),
    dict(lr=0.1, alpha=0.8, eps=0.1, centered=True, weight_decay=0.1, momentum=0.9),
]
LAMB = [
    dict(lr=0.1),
    dict(lr=1.0, betas=(0.8, 0.9), weight_decay=0.1),
    dict(lr=0.1, weight_decay=0.1, adam_w_mode=False),
    dict(lr=0.1, eps=1e-6, weight_decay=0.01, do_bias_correction=False),
    dict(lr=0.1, betas=(0.5, 0.9), weight_decay=0.1, amsgrad=True),
]


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "per-parameter"])
@pytest.mark.parametrize("name,options", ADAM, ids=_ids(ADAM))
def test_adam_without_bias_correction(name, options, foreach):
    params, grads = values()
    history, _ = train(name, {**options, "foreach": foreach}, params, grads)
    assert_steps_close(history, expected(oneflow.adam, {**options, "decoupled": name == "AdamW"}, params, grads))


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "per-parameter"])
@pytest.mark.parametrize("options", SGD, ids=_ids([("SGD", o) for o in SGD]))
def test_sgd_follows_oneflow(options, foreach):
    params, grads = values()
    history, _ = train("SGD", {**options, "foreach": foreach}, params, grads)
    assert_steps_close(history, expected(oneflow.sgd, options, params, grads))


@pytest.mark.parametrize("options", RMSPROP, ids=_ids([("RMSprop", o) for o in RMSPROP]))
def test_rmsprop_puts_eps_inside_the_square_root(options):
    params, grads = values()
    history, _ = train("RMSprop", options, params, grads)
    assert_steps_close(history, expected(oneflow.rmsprop, options, params, grads))


@pytest.mark.parametrize("options", LAMB, ids=_ids([("LAMB", o) for o in LAMB]))
def test_lamb_follows_oneflow(options):
    params, grads = values(zero_first=True)
    history, opt = train("LAMB", options, params, grads)
    assert_steps_close(history, expected(oneflow.lamb, options, params, grads))
    state = opt.state_dict()["state"][1]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if options.get("amsgrad") else set())
    assert state["step"].item() == STEPS


def test_lamb_state_dict_round_trips_through_a_file(tmp_path):
    """Two steps, the state saved with flow.save and loaded into a fresh LAMB, two more:
    the same parameters as four uninterrupted steps (OneFlow's rule throughout)."""
    options = dict(lr=0.1, betas=(0.8, 0.9), weight_decay=0.1, amsgrad=True)
    params, grads = values()
    ps = [flow.nn.Parameter(flow.tensor(p.copy())) for p in params]
    opt = flow.optim.LAMB(ps, **options)
    for step_grads in grads[:2]:
        for p, g in zip(ps, step_grads):
            p.grad = flow.tensor(g.copy())
        opt.step()
    flow.save(opt.state_dict(), str(tmp_path / "lamb.state"))
    resumed = flow.optim.LAMB(ps, **{**options, "lr": 0.5})
    resumed.load_state_dict(flow.load(str(tmp_path / "lamb.state")))
    assert resumed.param_groups[0]["lr"] == 0.1 and resumed.param_groups[0]["amsgrad"] is True
    for step_grads in grads[2:]:
        for p, g in zip(ps, step_grads):
            p.grad = flow.tensor(g.copy())
        resumed.step()
    final = expected(oneflow.lamb, options, params, grads)[-1]
    assert_steps_close([[p.numpy() for p in ps]], [final])


def test_lamb_checks_its_options():
    params = [flow.nn.Parameter(flow.ones(2))]
    with pytest.raises(ValueError, match="LAMB: Invalid beta parameter at index 0"):
        flow.optim.LAMB(params, betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="LAMB: Invalid learning rate: -1"):
        flow.optim.LAMB(params, lr=-1)


def test_oneflow_defaults_and_positional_arguments():
    params = [flow.nn.Parameter(flow.ones(2))]
    assert flow.optim.AdamW(params).defaults["weight_decay"] == 0.0  # PyTorch: 1e-2
    assert flow.optim.RMSprop(params).defaults["lr"] == 1e-3  # PyTorch: 1e-2
    assert flow.optim.Adagrad(params).defaults["lr"] == 1e-3  # PyTorch: 1e-2
    # OneFlow's order: Adam(params, lr, betas, eps, weight_decay, amsgrad, do_bias_correction)
    assert flow.optim.Adam(params, 0.1, (0.9, 0.99), 1e-8, 0.0, False, False).defaults["do_bias_correction"] is False
    # SGD(params, lr, momentum, dampening, weight_decay, nesterov, maximize)
    assert flow.optim.SGD(params, 0.1, 0.9, 0.5, 0.0, True, True).defaults["maximize"] is True


# -- CosineAnnealingWarmRestarts ------------------------------------------------------------

RESTARTS = [
    dict(T_0=3, decay_rate=0.5),
    dict(T_0=2, T_mult=2, eta_min=0.01, decay_rate=0.7),
    dict(T_0=2, T_mult=3, eta_min=0.05, decay_rate=0.5, restart_limit=2),
    dict(T_0=4, restart_limit=1),
]


def _lrs(sched, opt, steps):
    lrs = [sched.get_last_lr()]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr())
    return np.array(lrs)


@pytest.mark.parametrize("options", RESTARTS, ids=_ids([("restarts", o) for o in RESTARTS]))
def test_warm_restarts_decay_and_limit_restarts(options):
    groups = [{"params": [flow.nn.Parameter(flow.ones(2))]}, {"params": [flow.nn.Parameter(flow.ones(2))], "lr": 0.3}]
    opt = flow.optim.SGD(groups, lr=1.0)
    sched = flow.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, **options)
    reference = [[oneflow.warm_restarts_lr(base, step, **options) for base in (1.0, 0.3)] for step in range(30)]
    np.testing.assert_allclose(_lrs(sched, opt, 29), reference, rtol=1e-12, atol=1e-15)
    # step(epoch) jumps to the same closed form; the state dict resumes it
    sched.step(17)
    np.testing.assert_allclose(sched.get_last_lr(), reference[17], rtol=1e-12)
    state = sched.state_dict()
    fresh_opt = flow.optim.SGD(groups, lr=1.0)
    fresh = flow.optim.lr_scheduler.CosineAnnealingWarmRestarts(fresh_opt, T_0=options["T_0"])
    fresh.load_state_dict(state)
    fresh.step()
    np.testing.assert_allclose(fresh.get_last_lr(), reference[18], rtol=1e-12)


def test_warm_restarts_takes_oneflow_positional_arguments():
    opt = flow.optim.SGD([flow.nn.Parameter(flow.ones(2))], lr=1.0)
    # OneFlow's order: (optimizer, T_0, T_mult, eta_min, decay_rate, restart_limit)
    sched = flow.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, 2, 1, 0.0, 0.5, 0)
    for _ in range(4):
        sched.step()
    assert sched.get_last_lr() == pytest.approx([0.25])
    with pytest.raises(ValueError, match="restart_limit >= 0"):
        flow.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, 2, restart_limit=-1)
