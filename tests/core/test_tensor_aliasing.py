"""``.data`` and ``detach()`` share their tensor's value, as in PyTorch: an in-place update
of either side is seen by the other (the DCGAN init, EMA and weight-clipping idioms), while
views and the autograd tape's saved values stay snapshots."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flowserve as flow
import flowserve.nn as nn


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def _pair(values):
    return flow.nn.Parameter(flow.tensor(values)), torch.nn.Parameter(torch.tensor(values))


IDIOMS = {
    "data_add": lambda p: p.data.add_(1.0),
    "detach_mul": lambda p: p.detach().mul_(3.0),
    "data_fill": lambda p: p.data.fill_(0.0),
    "detach_zero": lambda p: p.detach().zero_(),
    "data_clamp": lambda p: p.data.clamp_(-0.5, 0.5),
    "chained_data": lambda p: p.data.data.mul_(2.0).add_(1.0),
    "data_of_detach": lambda p: p.detach().data.sub_(1.0),
    "setitem_on_data": lambda p: p.data.__setitem__(1, 7.0),
}


@pytest.mark.parametrize("name", IDIOMS)
def test_in_place_update_through_an_alias_reaches_the_tensor(name):
    f, t = _pair([0.25, -1.5, 2.0])
    IDIOMS[name](f)
    IDIOMS[name](t)
    _close(f.tolist(), t.tolist())
    assert f.requires_grad and f.is_leaf


def test_ema_update_matches_torch():
    values, decay = [[1.0, -2.0], [0.5, 3.0]], 0.9
    f_ema, t_ema = _pair(values)
    f_p, t_p = _pair([[2.0, 2.0], [-1.0, 0.0]])
    for _ in range(3):
        f_ema.data.mul_(decay).add_(f_p.data, alpha=1 - decay)
        t_ema.data.mul_(decay).add_(t_p.data, alpha=1 - decay)
    _close(f_ema.tolist(), t_ema.detach().tolist())


def test_dcgan_init_changes_the_module():
    flow.manual_seed(0)
    conv, bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
    conv.weight.data.normal_(0.0, 100.0)
    bn.weight.data.normal_(1.0, 0.02)
    bn.bias.data.fill_(0)
    assert float(conv.weight.abs().max()) > 10.0
    assert abs(float(bn.weight.mean()) - 1.0) < 0.1
    assert bn.bias.tolist() == [0.0] * 4


def test_update_of_the_tensor_reaches_its_aliases():
    f, t = _pair([1.0, 2.0])
    f_d, f_data, t_d, t_data = f.detach(), f.data, t.detach(), t.data
    with flow.no_grad():
        f.mul_(3.0)
    with torch.no_grad():
        t.mul_(3.0)
    _close(f_d.tolist(), t_d.tolist())
    _close(f_data.tolist(), t_data.tolist())
    f_d.add_(1.0)  # and from one alias to the other
    t_d.add_(1.0)
    _close(f_data.tolist(), t_data.tolist())


def test_optimizer_step_reaches_aliases():
    f, t = _pair([1.0, -2.0])
    f_view, t_view = f.detach(), t.detach()
    f_opt, t_opt = flow.optim.SGD([f], lr=0.1, momentum=0.9), torch.optim.SGD([t], lr=0.1, momentum=0.9)
    for _ in range(3):  # the later steps write into the optimizer's own arrays
        for p, opt in ((f, f_opt), (t, t_opt)):
            opt.zero_grad()
            (p * p).sum().backward()
            opt.step()
    _close(f_view.tolist(), t_view.tolist())


def test_assigning_data_replaces_the_value_and_ends_the_sharing():
    f = flow.nn.Parameter(flow.ones(2))
    old = f.detach()
    f.data = flow.tensor([5.0, 6.0])
    assert old.tolist() == [1.0, 1.0]
    with flow.no_grad():
        f.add_(1.0)
    assert f.tolist() == [6.0, 7.0] and old.tolist() == [1.0, 1.0]


def test_views_and_clones_stay_copies():
    f = flow.nn.Parameter(flow.ones(2, 2))
    view, clone = f.detach().reshape(4), f.detach().clone()
    f.data.add_(1.0)
    assert view.tolist() == [1.0] * 4 and clone.tolist() == [[1.0, 1.0]] * 2


def test_resizing_in_place_keeps_the_aliases_size():
    f = flow.ones(3)
    d = f.detach()
    f.unsqueeze_(0)
    f.add_(1.0)
    assert tuple(d.shape) == (3,) and tuple(f.shape) == (1, 3)


CHANGES = {
    "leaf_detach": lambda w, h: w.detach().add_(10.0),
    "leaf_data": lambda w, h: w.data.add_(10.0),
    "leaf_no_grad": lambda w, h: _no_grad(w.add_, 10.0),
    "non_leaf_detach": lambda w, h: h.detach().mul_(0.0),
}


def _no_grad(fn, *args):
    with flow.no_grad(), torch.no_grad():
        return fn(*args)


def _product(w):
    h = w * 3.0
    return h, (w * h).sum()  # the product saves both w and h


@pytest.mark.parametrize("name", CHANGES)
def test_gradient_is_that_of_the_values_the_forward_saw(name):
    """PyTorch refuses these backwards ("modified by an inplace operation"; with ``.data``
    it silently uses the new value); flowserve's tape keeps the value each op saw, so the
    gradient is PyTorch's for the program without the change, and the change stays."""
    f_w, t_w = _pair([1.0, 2.0])
    f_h, f_y = _product(f_w)
    t_h, t_y = _product(t_w)
    t_y.backward()  # the oracle: before the change
    CHANGES[name](f_w, f_h)
    CHANGES[name](t_w, t_h)
    f_y.backward()
    _close(f_w.grad.tolist(), t_w.grad.tolist())
    _close(f_w.tolist(), t_w.tolist())
    _close(f_h.tolist(), t_h.tolist())
    if name != "leaf_data":
        t_h, t_y = _product(t_w)
        CHANGES[name](t_w, t_h)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            t_y.backward()


def test_create_graph_refuses_a_leaf_changed_through_an_alias():
    w = flow.nn.Parameter(flow.tensor([1.0, 2.0]))
    y = (w * w).sum()
    w.data.add_(1.0)
    with pytest.raises(flow.errors.AutogradError, match="modified by an inplace operation"):
        flow.autograd.grad(y, w, create_graph=True)


class _Infer(nn.Graph):
    def __init__(self, lin):
        super().__init__()
        self.lin = lin

    def build(self, x):
        return self.lin(x)


def test_compiled_graph_sees_an_update_through_data():
    flow.manual_seed(0)
    lin = nn.Linear(3, 2)
    lin.eval()
    graph = _Infer(lin)
    x = flow.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    graph(x)
    lin.weight.data.mul_(0.5)
    lin.bias.detach().zero_()
    with flow.no_grad():
        eager = lin(x)
    _close(graph(x).numpy(), eager.numpy())


@pytest.mark.parametrize("init", [
    lambda w: nn.init.normal_(w, 0.0, 0.02),
    lambda w: nn.init.kaiming_uniform_(w, a=5 ** 0.5),
    lambda w: nn.init.constant_(w, 0.5),
    lambda w: nn.init.zeros_(w),
])
def test_init_functions_still_fill_the_parameter(init):
    w = nn.Linear(4, 3).weight
    before = w.detach().clone()
    d = w.detach()
    init(w)
    assert not np.array_equal(w.numpy(), before.numpy()) or np.all(before.numpy() == 0)
    _close(d.tolist(), w.tolist())
