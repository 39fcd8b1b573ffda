"""``flow.autograd.grad``, ``backward``, ``retain_graph``, ``create_graph`` and hooks against
PyTorch: the same values, the same gradients, the same errors, the same ``.grad`` state."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn.functional as F
from flowserve.errors import AutogradError

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
TF = torch.nn.functional

RTOL, ATOL = 1e-5, 1e-6


def pair(values, requires_grad=True):
    a = np.asarray(values, dtype=np.float32)
    return flow.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def same(ours, theirs) -> None:
    if theirs is None:
        assert ours is None
        return
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=RTOL, atol=ATOL)


def test_grad_returns_gradients_and_leaves_every_dot_grad_alone():
    (x, tx), (w, tw) = pair([1.0, 2.0]), pair([3.0, -1.0])
    x.grad, tx.grad = flow.tensor([5.0, 5.0]), torch.tensor([5.0, 5.0])
    (gx,) = flow.autograd.grad((x * w).sum(), [x])
    (tgx,) = torch.autograd.grad((tx * tw).sum(), [tx])
    same(gx, tgx)
    same(x.grad, tx.grad)
    assert w.grad is None and tw.grad is None
    assert not gx.requires_grad and not tgx.requires_grad


def test_grad_of_an_intermediate_tensor_and_of_several_outputs():
    (x, tx) = pair([0.5, -1.5, 2.0])
    h, th = x * x, tx * tx
    y, ty = (h.exp() + h).sum(), (th.exp() + th).sum()
    z, tz = (h * 3).sum(), (th * 3).sum()
    for ours, theirs in zip(flow.autograd.grad([y, z], [h, x]), torch.autograd.grad([ty, tz], [th, tx])):
        same(ours, theirs)


def test_grad_outputs_unused_inputs_and_inputs_without_grad():
    (x, tx), (u, tu) = pair([1.0, 2.0]), pair([4.0])
    seed = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    ours = flow.autograd.grad(x * x.reshape(2, 1), x, grad_outputs=flow.tensor(seed))
    theirs = torch.autograd.grad(tx * tx.reshape(2, 1), tx, grad_outputs=torch.tensor(seed))
    same(ours[0], theirs[0])
    with pytest.raises(AutogradError, match="appears to not have been used in the graph"):
        flow.autograd.grad((x * 2).sum(), [x, u])
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        torch.autograd.grad((tx * 2).sum(), [tx, tu])
    gx, gu = flow.autograd.grad((x * 2).sum(), [x, u], allow_unused=True)
    tgx, tgu = torch.autograd.grad((tx * 2).sum(), [tx, tu], allow_unused=True)
    same(gx, tgx)
    assert gu is None and tgu is None
    with pytest.raises(AutogradError, match="does not require grad"):
        flow.autograd.grad((x * 2).sum(), flow.ones(2))
    with pytest.raises(AutogradError, match="implicitly created only for scalar outputs"):
        flow.autograd.grad(x * 2, x)


def test_second_backward_without_retain_graph_raises_as_pytorch_does():
    (x, tx) = pair([1.0, 2.0])
    y, ty = (x * x).sum(), (tx * tx).sum()
    y.backward()
    ty.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time") as theirs:
        ty.backward()
    with pytest.raises(AutogradError) as ours:
        y.backward()
    assert str(ours.value) == str(theirs.value)
    (x, tx) = pair([1.0, 2.0])
    y, ty = (x * x).sum(), (tx * tx).sum()
    flow.autograd.grad(y, x)
    torch.autograd.grad(ty, tx)
    with pytest.raises(AutogradError, match="a second time"):
        y.backward()


def test_a_graph_with_no_saved_values_backwards_twice_as_in_pytorch():
    """PyTorch frees saved tensors, not sizes: add and sum keep working; mul's inputs are gone."""
    (x, tx) = pair([1.0, 2.0, 3.0])
    y, ty = (x + 1).sum(), (tx + 1).sum()
    for _ in range(2):
        y.backward()
        ty.backward()
    same(x.grad, tx.grad)
    z, tz = (x * x + 1).sum(), (tx * tx + 1).sum()
    z.backward()
    tz.backward()
    with pytest.raises(RuntimeError, match="a second time"):
        tz.backward()
    with pytest.raises(AutogradError, match="a second time"):
        z.backward()


def test_retain_graph_allows_a_second_backward_that_accumulates():
    (x, tx) = pair([1.0, -2.0, 0.5])
    y, ty = (x.tanh() * x).sum(), (tx.tanh() * tx).sum()
    y.backward(retain_graph=True)
    ty.backward(retain_graph=True)
    y.backward()
    ty.backward()
    same(x.grad, tx.grad)
    with pytest.raises(AutogradError, match="a second time"):
        y.backward()


@pytest.mark.parametrize("fn", [
    (lambda m, x: m.tanh(x)),
    (lambda m, x: F.softplus(x) if m is flow else TF.softplus(x)),
    (lambda m, x: F.softplus(x, beta=2.0) * x if m is flow else TF.softplus(x, beta=2.0) * x),
    (lambda m, x: m.sigmoid(x) * m.exp(x * 0.5)),
], ids=["tanh", "softplus", "softplus_beta_times_x", "sigmoid_times_exp"])
def test_create_graph_gives_second_derivatives(fn):
    values = [-2.0, -0.3, 0.0, 0.7, 3.0]
    (x, tx) = pair(values)
    (g,) = flow.autograd.grad(fn(flow, x).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad(fn(torch, tx).sum(), tx, create_graph=True)
    same(g, tg)
    assert g.requires_grad and tg.requires_grad
    (h,) = flow.autograd.grad(g.sum(), x)
    (th,) = torch.autograd.grad(tg.sum(), tx)
    same(h, th)


def _mlp_weights(rng):
    return [rng.standard_normal(s).astype(np.float32) * 0.5 for s in [(5, 3), (5,), (2, 5), (2,)]]


def test_create_graph_through_a_small_mlp_gradient_penalty_and_hessian_vector():
    rng = np.random.default_rng(0)
    weights = _mlp_weights(rng)
    data = rng.standard_normal((4, 3)).astype(np.float32)
    vec = rng.standard_normal((4, 3)).astype(np.float32)
    ours = [flow.tensor(w, requires_grad=True) for w in weights]
    theirs = [torch.tensor(w, requires_grad=True) for w in weights]

    def run(m, lin, act, params, tensor):
        x = tensor(data, requires_grad=True)
        w1, b1, w2, b2 = params
        out = lin(act(lin(x, w1, b1)), w2, b2)
        (gx,) = m.autograd.grad(out.sum(), x, create_graph=True)
        penalty = (gx * gx).sum()
        hvp = m.autograd.grad((gx * tensor(vec)).sum(), x, retain_graph=True)[0]
        penalty.backward()
        return gx, penalty, hvp

    results = run(flow, F.linear, F.softplus, ours, flow.tensor)
    expected = run(torch, TF.linear, TF.softplus, theirs, torch.tensor)
    for a, b in zip(results, expected):
        same(a, b)
    for p, tp in zip(ours, theirs):
        same(p.grad, tp.grad)


def test_create_graph_refuses_a_leaf_changed_in_place_since_the_forward():
    (x, tx) = pair([0.5, 1.0])
    y, ty = (x * x).sum(), (tx * tx).sum()
    with flow.no_grad():
        x.mul_(2)
    with torch.no_grad():
        tx.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(ty, tx, create_graph=True)
    with pytest.raises(AutogradError, match="modified by an inplace operation"):
        flow.autograd.grad(y, x, create_graph=True)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_backward_create_graph_makes_dot_grad_differentiable():
    (x, tx) = pair([0.3, -1.2])
    (x ** 3).sum().backward(create_graph=True)
    (tx ** 3).sum().backward(create_graph=True)
    same(x.grad, tx.grad)
    (g2,) = flow.autograd.grad(x.grad.sum(), x)
    (tg2,) = torch.autograd.grad(tx.grad.sum(), tx)
    same(g2, tg2)


def test_hooks_on_leaves_and_intermediates_replace_gradients_and_can_be_removed():
    (x, tx) = pair([1.0, 2.0, 3.0])
    seen, tseen = [], []
    handles = [x.register_hook(lambda g: g * 2), tx.register_hook(lambda g: g * 2)]
    h, th = x.exp(), tx.exp()
    h.register_hook(lambda g: seen.append(g.numpy().copy()))
    th.register_hook(lambda g: tseen.append(g.detach().numpy().copy()))
    h.register_hook(lambda g: g + 1)
    th.register_hook(lambda g: g + 1)
    h.retain_grad()
    th.retain_grad()
    (h * h).sum().backward()
    (th * th).sum().backward()
    same(x.grad, tx.grad)
    same(h.grad, th.grad)
    np.testing.assert_allclose(seen[0], tseen[0], rtol=RTOL)
    for handle in handles:
        handle.remove()
    x.grad, tx.grad = None, None
    (x * x).sum().backward()
    (tx * tx).sum().backward()
    same(x.grad, tx.grad)


def test_hooks_run_in_autograd_grad_too():
    (x, tx) = pair([1.0, -1.0])
    x.register_hook(lambda g: g * 10)
    tx.register_hook(lambda g: g * 10)
    same(flow.autograd.grad((x * x).sum(), x)[0], torch.autograd.grad((tx * tx).sum(), tx)[0])
    with pytest.raises(AutogradError, match="doesn't require gradient"):
        flow.ones(2).register_hook(lambda g: g)


def test_backward_inputs_limits_which_leaves_get_grad():
    (x, tx), (w, tw) = pair([1.0, 2.0]), pair([0.5, 0.25])
    (x * w).sum().backward(inputs=[w])
    (tx * tw).sum().backward(inputs=[tw])
    same(w.grad, tw.grad)
    assert x.grad is None and tx.grad is None
