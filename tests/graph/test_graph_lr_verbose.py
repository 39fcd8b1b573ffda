"""OneFlow's ``verbose=True`` of a learning-rate scheduler attached to a graph
(``add_optimizer(opt, lr_sch=scheduler)``): before each training call rank 0 prints
``Last step <step> adjusting learning rate to <lr>``, the lr that call trains with, one line
per parameter group, as OneFlow's graph does; nothing without it, nothing on other ranks."""

from __future__ import annotations

import numpy as np

import flowserve as flow
import flowserve.nn as nn
from flowserve.optim import lr_scheduler


class _Train(nn.Graph):
    def __init__(self, model, opt, sched):
        super().__init__()
        self.model = model
        self.add_optimizer(opt, lr_sch=sched)

    def build(self, x):
        loss = self.model(x).sum()
        loss.backward()
        return loss


def _run(make_sched, groups: int = 1, steps: int = 3):
    """Train ``steps`` calls; returns the lr of each call's groups, as eager mode steps them."""
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    params = [{"params": model[i].parameters()} for i in range(groups)] if groups > 1 else model.parameters()
    opt = flow.optim.SGD(params, lr=0.1)
    sched = make_sched(opt)
    graph = _Train(model, opt, sched)
    seen = []
    for _ in range(steps):
        seen.append([group["lr"] for group in opt.param_groups])
        graph(flow.ones(4, 3))
    return seen


def _lines(seen) -> list[str]:
    return [f"Last step {step} adjusting learning rate to {np.float32(lr):g}"
            for step, lrs in enumerate(seen) for lr in lrs]


def test_a_verbose_scheduler_prints_each_calls_learning_rate_on_rank_zero_only(capsys, monkeypatch):
    seen = _run(lambda opt: lr_scheduler.CosineDecayLR(opt, decay_steps=4, verbose=True))
    printed = capsys.readouterr().out.splitlines()
    assert printed == _lines(seen)
    assert printed[0] == "Last step 0 adjusting learning rate to 0.1"
    assert printed[1] == "Last step 1 adjusting learning rate to 0.0853553"  # 0.1 * (1 + cos(pi / 4)) / 2
    _run(lambda opt: lr_scheduler.CosineDecayLR(opt, decay_steps=4))
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(flow.env, "get_rank", lambda: 1)
    _run(lambda opt: lr_scheduler.WarmUpLR(opt, warmup_iters=2, verbose=True))
    assert capsys.readouterr().out == ""


def test_every_group_is_printed_and_verbose_may_be_set_on_any_scheduler(capsys):
    def make(opt):
        sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        sched.verbose = True
        return sched

    seen = _run(make, groups=2)
    printed = capsys.readouterr().out.splitlines()
    assert printed == _lines(seen) and len(printed) == 6
    assert printed[-1] == "Last step 2 adjusting learning rate to 0.025"


def test_verbose_is_kept_and_saved_only_where_set():
    opt = flow.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    for sched in (lr_scheduler.CosineDecayLR(opt, decay_steps=3, verbose=True),
                  lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, verbose=True),
                  lr_scheduler.WarmUpLR(opt, warmup_iters=2, verbose=True)):
        assert sched.verbose and sched.state_dict()["verbose"] is True
    plain = lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2)
    assert not plain.verbose and "verbose" not in plain.state_dict()  # PyTorch's keys
