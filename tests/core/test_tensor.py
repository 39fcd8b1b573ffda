"""Tensor semantics: setitem, in-place rules, random fills, new_*, whole-tensor comparisons,
errors that name the op, and indexing/in-place ops inside nn.Graph (ONNX Runtime)."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import AutogradError, DTypeError, GraphError, ShapeError

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")


# -- __setitem__ --------------------------------------------------------------------------------

SETITEM_CASES = [
    ("int_row", lambda x: x.__setitem__(1, 5.0)),
    ("slice_tensor", lambda x: x.__setitem__((slice(None), slice(1, 3)), x[:, :2] * 2)),
    ("list_cols", lambda x: x.__setitem__((slice(None), [0, 3]), -1.0)),
    ("pairs", lambda x: x.__setitem__(([0, 2], [1, 3]), 9.0)),
    ("mask", lambda x: x.__setitem__(x > 0, 0.0)),
    ("mask_rows", lambda x: x.__setitem__(np.array([True, False, True]), 3.0)),
    ("ellipsis_broadcast", lambda x: x.__setitem__((Ellipsis, 0), x[:, 1])),
]


@pytest.mark.parametrize("fn", [pytest.param(f, id=name) for name, f in SETITEM_CASES])
def test_setitem_matches_torch_with_gradients(fn):
    data = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    fa, ta = flow.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    fx, tx = fa * 1.5, ta * 1.5
    fn(fx)
    fn(tx)
    np.testing.assert_allclose(fx.numpy(), tx.detach().numpy(), rtol=1e-6)
    (fx * fx).sum().backward()
    (tx * tx).sum().backward()
    np.testing.assert_allclose(fa.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_setitem_value_gets_its_gradient():
    x = flow.zeros(2, 3)
    v = flow.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x[1] = v
    (x * flow.tensor([[1.0, 1.0, 1.0], [2.0, 3.0, 4.0]])).sum().backward()
    assert v.grad.tolist() == [2.0, 3.0, 4.0]


def test_setitem_wrong_value_shape_names_the_op():
    with pytest.raises(ShapeError, match="setitem expected .* indexed size \\(3,\\)"):
        flow.zeros(2, 3).__setitem__(0, flow.ones(2))


# -- in-place rules -------------------------------------------------------------------------------


def test_inplace_on_leaf_requiring_grad_raises_pytorchs_message():
    w = flow.ones(3, requires_grad=True)
    for op in (lambda: w.add_(1), lambda: w.mul_(2), lambda: w.__setitem__(0, 1.0), lambda: w.zero_()):
        with pytest.raises(AutogradError, match="a leaf Variable that requires grad is being used in an in-place"):
            op()
    with flow.no_grad():
        w.add_(1)
    assert w.tolist() == [2.0, 2.0, 2.0]


def test_inplace_dtype_and_shape_rules_follow_pytorch():
    with pytest.raises(DTypeError, match="result type Float can't be cast to the desired output type Long"):
        flow.zeros(3, dtype=flow.int64).add_(1.5)
    with pytest.raises(ShapeError, match="output with shape \\[3\\] doesn't match the broadcast shape \\[2, 3\\]"):
        flow.zeros(3).add_(flow.ones(2, 3))
    x = flow.ones(3, dtype=flow.float16)
    x.mul_(flow.tensor([2.0, 3.0, 4.0], dtype=flow.float64))
    assert x.dtype == flow.float16 and x.tolist() == [2.0, 3.0, 4.0]


@pytest.mark.parametrize("name,args", [("add_", (2,)), ("sub_", (1.5,)), ("mul_", (3,)), ("div_", (4,)),
                                       ("pow_", (2,)), ("clamp_", (-0.5, 0.5)), ("remainder_", (0.7,)),
                                       ("fmod_", (0.7,)), ("floor_", ()), ("ceil_", ()), ("round_", ()),
                                       ("sin_", ()), ("exp_", ()), ("neg_", ()), ("abs_", ()),
                                       ("reciprocal_", ()), ("masked_fill_", (None, 2.0))])
def test_inplace_methods_match_torch(name, args):
    data = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    fx, tx = flow.tensor(data), torch.tensor(data)
    if name == "masked_fill_":
        args = (data > 0, 2.0)
        getattr(fx, name)(flow.tensor(args[0]), 2.0)
        getattr(tx, name)(torch.tensor(args[0]), 2.0)
    else:
        assert getattr(fx, name)(*args) is fx
        getattr(tx, name)(*args)
    np.testing.assert_allclose(fx.numpy(), tx.numpy(), rtol=1e-6, atol=1e-6)


def test_inplace_on_non_leaf_keeps_the_gradient_path():
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    y = a * 2
    y.mul_(a)  # y = 2a^2
    y.sum().backward()
    assert a.grad.tolist() == [4.0, 8.0]


def test_operators_in_place():
    x = flow.arange(6)
    x += 1
    x //= 2
    x %= 2
    assert x.tolist() == [0, 1, 1, 0, 0, 1]
    y = flow.arange(4).unsqueeze_(0)
    assert tuple(y.shape) == (1, 4)


# -- creation and random fills ------------------------------------------------------------------------


def test_random_fills_are_seeded_and_in_range():
    flow.manual_seed(3)
    a = flow.empty(1000).normal_(2.0, 0.5)
    flow.manual_seed(3)
    b = flow.empty(1000).normal_(2.0, 0.5)
    assert flow.equal(a, b)
    assert abs(a.mean().item() - 2.0) < 0.1 and abs(a.std().item() - 0.5) < 0.1
    u = flow.zeros(1000, dtype=flow.float64).uniform_(-1, 3)
    assert u.dtype == flow.float64 and -1 <= u.min().item() and u.max().item() < 3


def test_new_and_like_constructors_keep_dtype_and_device():
    x = flow.ones(2, dtype=flow.float64)
    assert x.new_zeros(3).dtype == flow.float64 and x.new_ones((2, 2)).shape == (2, 2)
    assert x.new_full((2,), 7).tolist() == [7.0, 7.0] and x.new_empty(4).shape == (4,)
    assert x.new_tensor([1, 2]).dtype == flow.float64
    assert flow.full((2,), True).dtype == flow.bool and flow.full((2,), 3).dtype == flow.int64
    assert flow.eye(3).sum().item() == 3.0 and flow.full_like(x, 2).tolist() == [2.0, 2.0]
    assert sorted(flow.randperm(5).tolist()) == [0, 1, 2, 3, 4]
    r = flow.randint(2, 5, (100,))
    assert r.dtype == flow.int64 and 2 <= r.min().item() and r.max().item() < 5
    assert tuple(flow.randint(10, (2, 3)).shape) == (2, 3) and flow.empty_like(x).dtype == flow.float64
    assert flow.randint_like(x, 4).dtype == flow.float64 and flow.zeros_like(r).dtype == flow.int64


def test_allclose_equal_isclose():
    a = flow.tensor([1.0, 2.0, float("nan")])
    assert flow.allclose(a[:2], a[:2] + 1e-7) and not flow.allclose(a[:2], a[:2] + 1e-3)
    assert not flow.allclose(a, a) and flow.allclose(a, a, equal_nan=True)
    assert flow.equal(flow.arange(3), flow.tensor([0, 1, 2])) and not flow.equal(flow.ones(2), flow.ones(3))
    assert flow.isclose(flow.tensor([1.0, 2.0]), 1.0).tolist() == [True, False]


# -- errors name the op ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fn,error,pattern", [
    (lambda: flow.gather(flow.ones(3, 4), 1, flow.zeros(3, dtype=flow.int64)), ShapeError, "gather expected an index with as many dims"),
    (lambda: flow.gather(flow.ones(3, 4), 1, flow.zeros(3, 4)), DTypeError, "gather expected an int64"),
    (lambda: flow.bmm(flow.ones(2, 3), flow.ones(3, 2)), ShapeError, "bmm expected \\(B, N, K\\)"),
    (lambda: flow.einsum("ij,jk->ik", flow.ones(2, 3), flow.ones(4, 2)), ShapeError, "einsum expected index 'j'"),
    (lambda: flow.einsum("ii->i", flow.ones(2, 2)), ShapeError, "einsum expected no index repeated"),
    (lambda: flow.topk(flow.ones(3), 5), ShapeError, "topk expected k in \\[0, 3\\]"),
    (lambda: flow.ones(3, 4)[:, [0, 7]], IndexError, "index 7 is out of bounds for dimension 1 with size 4"),
    (lambda: flow.ones(2).masked_fill(flow.ones(2), 0), TypeError, "masked_fill expected a bool mask"),
    (lambda: flow.split(flow.ones(5), [2, 2]), ShapeError, "split expected sections that sum to 5"),
    (lambda: flow.narrow(flow.ones(5), 0, 3, 4), ShapeError, "narrow expected start \\+ length <= 5"),
    (lambda: flow.bitwise_and(flow.ones(2), flow.ones(2)), DTypeError, "bitwise_and expected integer or bool"),
    (lambda: flow.repeat(flow.ones(2, 3), 2), ShapeError, "repeat expected at least 2 repeat sizes"),
])
def test_errors_name_the_op(fn, error, pattern):
    with pytest.raises(error, match=pattern):
        fn()


# -- inside nn.Graph (lowered to ONNX, run by ONNX Runtime) -----------------------------------------------


class Picker(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", flow.zeros(3))

    def forward(self, x, idx):
        y = x[:, idx] * 2
        y[:, 0] = -1.0
        y = flow.where(y > 0.5, y, flow.zeros(()))
        top = y.topk(2, dim=1)
        self.steps.add_(1)
        return (top.values.cumsum(1) + x.gather(1, top.indices) + flow.einsum("bi,bj->b", x, x).unsqueeze(1)
                + x.max(1).values.unsqueeze(1) + flow.erf(x).flip(1)[:, :2] + x.var(1, keepdim=True) + top.indices)


class PickerGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x, idx):
        return self.model(x, idx)


def test_indexing_and_inplace_ops_run_in_a_graph_as_in_eager():
    x = flow.randn(4, 5)
    idx = flow.tensor([4, 0, -2, 1])
    eager_model, graph_model = Picker(), Picker()
    expected = eager_model(x, idx)
    got = PickerGraph(graph_model)(x, idx)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    assert graph_model.steps.tolist() == [1.0, 1.0, 1.0]


def test_boolean_mask_indexing_in_a_graph_says_how_to_write_it():
    class Masked(nn.Graph):
        def build(self, x):
            return x[x > 0]

    with pytest.raises(GraphError, match="data-dependent shape.*flow.where"):
        Masked()(flow.randn(3))


def test_boolean_mask_setitem_in_a_graph_is_a_where():
    class Clip(nn.Graph):
        def build(self, x):
            y = x * 1.0
            y[y < 0] = 0.0
            return y

    x = flow.randn(3, 4)
    np.testing.assert_allclose(Clip()(x).numpy(), np.maximum(x.numpy(), 0), rtol=1e-6)


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(flow.tensor(np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32)))

    def forward(self, x, idx):
        h = x @ self.weight
        h[:, 0] = h[:, 1] * 0.5
        picked = h.gather(1, idx) + h[:, [5, 2]].cumsum(1)
        top = h.topk(3, dim=1).values
        return picked.sum() + top.logsumexp(1).sum() + h.sort(1, descending=True).values[:, 0].sum() \
            + h.norm(dim=1).sum() + h.prod(1).sum() + flow.erf(h).sum()


class ScorerTrain(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

    def build(self, x, idx):
        loss = self.model(x, idx)
        loss.backward()
        return loss


def test_gradients_of_tensor_ops_in_a_training_graph_match_eager():
    x = flow.tensor(np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32))
    idx = flow.tensor(np.random.default_rng(4).integers(0, 6, (4, 2)))
    eager, graph_model = Scorer(), Scorer()
    opt = flow.optim.SGD(eager.parameters(), lr=0.1)
    loss = eager(x, idx)
    loss.backward()
    opt.step()
    graph_loss = ScorerTrain(graph_model)(x, idx)
    np.testing.assert_allclose(graph_loss.numpy(), loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(graph_model.weight.numpy(), eager.weight.numpy(), rtol=1e-5, atol=1e-6)
