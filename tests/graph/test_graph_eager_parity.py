"""Behaviours that must give eager mode's numbers in nn.Graph: gradient clipping inside
build(), random ops, a batch size that stays symbolic, output names, int32 class labels."""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnxruntime as ort
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import ShapeError
from flowserve.exporter import export


def _close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(b).max())))


def _model(seed=0):
    flow.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _batch(seed=1, n=5):
    rng = np.random.default_rng(seed)
    return flow.tensor(rng.standard_normal((n, 6)).astype(np.float32) * 4), \
        flow.tensor(rng.standard_normal((n, 3)).astype(np.float32))


# -- 1. clipping -------------------------------------------------------------------------------


class _ClipGraph(nn.Graph):
    def __init__(self, model, opt, clip):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.clip = clip

    def build(self, x, y):
        loss = ((self.model(x) - y) ** 2).sum()
        loss.backward()
        return loss, self.clip(self.model.parameters())


def _eager_steps(model, opt, clip, steps, x, y):
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).sum()
        loss.backward()
        norm = clip(model.parameters())
        opt.step()
        out.append((float(loss), None if norm is None else float(norm)))
    return out


@pytest.mark.parametrize("kind", ["norm2", "norm_inf", "value"])
def test_clipping_inside_build_matches_eager(kind):
    clip = {"norm2": lambda ps: nn.utils.clip_grad_norm_(ps, 1.0),
            "norm_inf": lambda ps: nn.utils.clip_grad_norm_(ps, 0.5, norm_type=float("inf")),
            "value": lambda ps: nn.utils.clip_grad_value_(ps, 0.1)}[kind]
    x, y = _batch()
    eager, graph_model = _model(), _model()
    eager_opt = flow.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    expected = _eager_steps(eager, eager_opt, clip, 3, x, y)
    graph = _ClipGraph(graph_model, flow.optim.SGD(graph_model.parameters(), lr=0.05, momentum=0.9), clip)
    for loss, norm in expected:
        got_loss, got_norm = graph(x, y) if kind != "value" else (graph(x, y)[0], None)
        _close(float(got_loss), loss)
        if norm is not None:
            assert norm > 1.0  # the gradients really are clipped
            _close(float(got_norm), norm)
    for (name, p), q in zip(eager.named_parameters(), graph_model.parameters()):
        _close(q.numpy(), p.numpy())
    for p in graph_model.parameters():  # the eager .grad is not left holding a graph value
        assert p.grad is None or p.grad._lazy is None


def test_clip_update_norm_is_bounded_in_graph():
    """SGD with lr=1: a step clipped to max_norm 1 moves the parameters by exactly 1."""
    model = _model()
    x, y = _batch()
    graph = _ClipGraph(model, flow.optim.SGD(model.parameters(), lr=1.0),
                       lambda ps: nn.utils.clip_grad_norm_(ps, 1.0))
    before = [p.numpy().copy() for p in model.parameters()]
    _, raw_norm = graph(x, y)
    moved = np.sqrt(sum(((p.numpy() - b) ** 2).sum() for p, b in zip(model.parameters(), before)))
    assert float(raw_norm) > 2.0
    assert abs(moved - 1.0) < 1e-4


class _PlainGraph(nn.Graph):
    def __init__(self, model, opt):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)

    def build(self, x, y):
        loss = ((self.model(x) - y) ** 2).sum()
        loss.backward()
        return loss


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_param_group_clip_grad_max_norm(norm_type):
    """OneFlow's per-group clip_grad_max_norm/clip_grad_norm_type: eager step() and graph
    both clip, and equal clip_grad_norm_ followed by a plain step."""
    x, y = _batch()
    models = [_model() for _ in range(3)]

    def groups(m):
        return [{"params": m.parameters(), "clip_grad_max_norm": 0.5, "clip_grad_norm_type": norm_type}]

    ref = models[0]
    ref_opt = flow.optim.Adam(ref.parameters(), lr=0.01)
    for _ in range(3):
        ref_opt.zero_grad()
        ((ref(x) - y) ** 2).sum().backward()
        nn.utils.clip_grad_norm_(ref.parameters(), 0.5, norm_type)
        ref_opt.step()
    eager = models[1]
    eager_opt = flow.optim.Adam(groups(eager), lr=0.01)
    for _ in range(3):
        eager_opt.zero_grad()
        ((eager(x) - y) ** 2).sum().backward()
        eager_opt.step()
    graph = _PlainGraph(models[2], flow.optim.Adam(groups(models[2]), lr=0.01))
    for _ in range(3):
        graph(x, y)
    for a, b, c in zip(ref.parameters(), eager.parameters(), models[2].parameters()):
        _close(b.numpy(), a.numpy())
        _close(c.numpy(), a.numpy())


# -- 2. random ops -------------------------------------------------------------------------------


class _RandomGraph(nn.Graph):
    def build(self, x):
        b = x.shape[0]
        return {"randn_like": x + flow.randn_like(x), "rand": flow.rand(b, 64),
                "randn": flow.randn(b, 64), "randint": flow.randint(0, 10, (b, 64)),
                "bernoulli": flow.bernoulli(flow.full((64,), 0.3)), "normal_": (x * 0).normal_(),
                "normal": flow.normal(x, 2.0), "uniform_": (x * 0).uniform_(-1, 1),
                "dropout_a": nn.functional.dropout(x + 1, 0.5), "dropout_b": nn.functional.dropout(x + 1, 0.5)}


def test_random_ops_draw_fresh_values_every_call():
    flow.manual_seed(0)
    graph = _RandomGraph()
    first, second = graph(flow.zeros(8, 64)), graph(flow.zeros(8, 64))
    for key in first:
        assert not np.array_equal(first[key].numpy(), second[key].numpy()), key
    r = first["rand"].numpy()
    assert r.min() >= 0 and r.max() < 1 and abs(r.mean() - 0.5) < 0.05
    n = np.concatenate([first["randn"].numpy().ravel(), first["randn_like"].numpy().ravel()])
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1
    i = first["randint"].numpy()
    assert i.dtype == np.int64 and i.min() == 0 and i.max() == 9
    assert set(np.unique(first["bernoulli"].numpy())) <= {0.0, 1.0}
    assert not np.array_equal(first["dropout_a"].numpy(), first["dropout_b"].numpy())  # own streams
    bigger = graph(flow.zeros(3, 64))  # a new batch size follows the inputs
    assert bigger["rand"].shape == flow.Size([3, 64]) and bigger["randint"].shape == flow.Size([3, 64])


def test_graph_draws_repeat_under_manual_seed():
    runs = []
    for _ in range(2):
        flow.manual_seed(123)
        graph = _RandomGraph()
        runs.append([graph(flow.zeros(4, 64))["randn"].numpy() for _ in range(2)])
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


class _Noisy(nn.Module):
    """A VAE's reparameterisation: a fresh noise sample per call."""

    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(4, 4)

    def forward(self, x):
        return self.mu(x) + flow.randn_like(x) * 0.5


def test_noise_in_a_training_graph_is_fresh_each_step():
    flow.manual_seed(0)
    model = _Noisy()
    opt = flow.optim.SGD(model.parameters(), lr=0.0)  # lr 0: only the noise can change the loss

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt)

        def build(self, x):
            loss = (self.model(x) ** 2).mean()
            loss.backward()
            return loss

    g, x = G(), flow.ones(16, 4)
    losses = {round(float(g(x)), 6) for _ in range(4)}
    assert len(losses) == 4


# -- 3. a symbolic batch ------------------------------------------------------------------------


class _TokenModel(nn.Module):
    """ViT's class token and position table, DropPath's per-sample shape, and the
    batch-sized tensors real models build from ``x.shape[0]``."""

    def __init__(self):
        super().__init__()
        flow.manual_seed(3)
        self.cls_token = nn.Parameter(flow.randn(1, 1, 8))
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        b, t, c = x.shape
        tokens = flow.cat([self.cls_token.expand(x.shape[0], -1, -1), self.proj(x)], dim=1)
        extra = self.cls_token.repeat(b, 1, 1) + flow.zeros(x.shape[0], 1, c)
        keep = flow.ones(b, 1, 1)  # DropPath's per-sample mask shape
        mixed = tokens.view(b, t + 1, 2, c // 2).reshape(b, -1) * keep.view(b, 1)
        return mixed + extra.view(b, -1).sum(-1, keepdim=True)


class _TokenGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def test_batch_stays_symbolic_through_expand_view_repeat_zeros(tmp_path):
    model = _TokenModel().eval()
    graph = _TokenGraph(model)
    graph(flow.randn(2, 3, 8))
    for batch in (1, 5, 2):  # in-process, at other batch sizes
        x = flow.randn(batch, 3, 8)
        _close(graph(x).numpy(), model(x).numpy())
    flow.save(graph, tmp_path / "g")
    manifest = json.loads((tmp_path / "g" / "flowserve.json").read_text())
    assert manifest["inputs"][0]["shape"] == [-1, 3, 8] and manifest["batch_note"] is None
    loaded = flow.load(tmp_path / "g")
    onnx_path = tmp_path / "m.onnx"
    export(tmp_path / "g", onnx_path)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        x = flow.randn(batch, 3, 8)
        ref = model(x).numpy()
        _close(loaded(x).numpy(), ref)
        _close(session.run(None, {"x": x.numpy()})[0], ref)


class _ArithmeticModel(nn.Module):
    """nanoGPT's habit: ``B, T, C = x.shape`` then sizes computed from them."""

    def __init__(self):
        super().__init__()
        flow.manual_seed(4)
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8 * 3, 4)

    def forward(self, x):
        B, T, C = x.shape
        flat = self.proj(x).view(B * T, C).relu()  # the batch merged with T
        back = flat.reshape(B, T * C)
        pair = flow.zeros(2 * B, 2).view(B, 4) + flow.ones(B + 1, 4).sum(0)  # 2 * B and B + 1 rows
        shifted = flow.arange(B - 1 + 1).float().view(B, 1)  # B - 1 + 1 is B again
        return self.head(back) + pair + shifted, flat.view(-1).sum()


def test_batch_stays_symbolic_through_shape_arithmetic(tmp_path):
    model = _ArithmeticModel().eval()
    graph = _TokenGraph(model)
    graph(flow.randn(2, 3, 8))
    for batch in (1, 5, 2):  # in-process, at other batch sizes: graph == eager
        x = flow.randn(batch, 3, 8)
        for got, ref in zip(graph(x), model(x)):
            _close(got.numpy(), ref.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "runs at batch size 2 only"
        flow.save(graph, tmp_path / "g")
    manifest = json.loads((tmp_path / "g" / "flowserve.json").read_text())
    assert manifest["inputs"][0]["shape"] == [-1, 3, 8] and manifest["batch_note"] is None
    loaded = flow.load(tmp_path / "g")
    export(tmp_path / "g", tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        x = flow.randn(batch, 3, 8)
        refs = [r.numpy() for r in model(x)]
        for got, ref in zip(loaded(x), refs):
            _close(np.asarray(got), ref)
        for got, ref in zip(session.run(None, {"x": x.numpy()}), refs):
            _close(got, ref)


def test_batch_floor_division_follows_the_batch(tmp_path):
    class Halves(nn.Module):  # runs at even batch sizes only: flow.save checks at twice the batch
        def forward(self, x):
            B, C = x.shape
            return x.view(B // 2, 2 * C).flip(-1).reshape(B, C) + flow.ones(B // 2 + 1, C).sum(0)

    graph = _TokenGraph(Halves())
    graph(flow.randn(4, 3))
    for batch in (2, 6):
        x = flow.randn(batch, 3)
        _close(graph(x).numpy(), Halves()(x).numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flow.save(graph, tmp_path / "g")
    x = flow.randn(8, 3)
    _close(np.asarray(flow.load(tmp_path / "g")(x)), Halves()(x).numpy())
    export(tmp_path / "g", tmp_path / "m.onnx", check=False)  # the parity check runs at batch 5
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    _close(session.run(None, {"x": x.numpy()})[0], Halves()(x).numpy())


def test_slices_along_the_batch_follow_it(tmp_path):
    class Halves(nn.Module):  # contrastive-style: the first half against the second
        def forward(self, x):
            B = x.shape[0]
            first, second, last = x[: B // 2], x[B // 2 * 1:], x[-1:]
            return x * (first.sum() - second.sum()) + x[1:].sum(0) + last + x[B - 2:].mean(0)

    graph = _TokenGraph(Halves())
    graph(flow.randn(4, 3))
    for batch in (2, 5, 7):
        x = flow.randn(batch, 3)
        _close(graph(x).numpy(), Halves()(x).numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flow.save(graph, tmp_path / "g")
    export(tmp_path / "g", tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    for batch in (2, 6):
        x = flow.randn(batch, 3)
        _close(session.run(None, {"x": x.numpy()})[0], Halves()(x).numpy())
        _close(np.asarray(flow.load(tmp_path / "g")(x)), Halves()(x).numpy())


def test_an_output_with_the_batch_merged_names_the_fix():
    class Merged(nn.Module):
        def forward(self, x):
            B, T, C = x.shape
            return x.view(B * T, C)

    graph = _TokenGraph(Merged())
    graph(flow.randn(2, 3, 8))
    with pytest.raises(flow.errors.GraphError, match=r"output 0 has dim 0 of size 6 at batch size 2.*view\(B, T, C\)"):
        graph(flow.randn(3, 3, 8))


class _Baked(nn.Module):
    def __init__(self):
        super().__init__()
        self.cls_token = nn.Parameter(flow.zeros(1, 1, 8))

    def forward(self, x):
        return flow.cat([self.cls_token.expand(2, -1, -1), x], dim=1)  # the batch size written out


def test_baked_batch_is_reported_with_op_and_line(tmp_path):
    graph = _TokenGraph(_Baked())
    graph(flow.randn(2, 3, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flow.save(graph, tmp_path / "g")
    manifest = json.loads((tmp_path / "g" / "flowserve.json").read_text())
    assert manifest["inputs"][0]["shape"] == [2, 3, 8]
    note = manifest["batch_note"]
    assert "'expand'" in note and f"{__file__}:" in note
    assert any(note in str(w.message) for w in caught)
    loaded = flow.load(tmp_path / "g")
    assert loaded(flow.randn(2, 3, 8)).shape == flow.Size([2, 4, 8])
    with pytest.raises(ShapeError, match="expand"):
        loaded(flow.randn(5, 3, 8))


def test_a_reshape_with_minus_one_keeps_the_batch_for_sizes_read_from_it(tmp_path):
    class Rows(nn.Module):  # mnist_rnn: input.reshape(-1, 28, 28), then state sized by input.size(0)
        def forward(self, x):
            rows = x.reshape(-1, 4)  # (B, 2, 4) -> (2B, 4)
            back = rows.view(-1, 2, 4)  # -> (B, 2, 4)
            return back + flow.zeros(back.size(0), 1, 1) + flow.ones(rows.shape[0] // 2, 1, 1)

    graph = _TokenGraph(Rows())
    graph(flow.randn(3, 2, 4))
    for batch in (1, 5):
        x = flow.randn(batch, 2, 4)
        _close(graph(x).numpy(), Rows()(x).numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flow.save(graph, tmp_path / "g")
    x = flow.randn(6, 2, 4)
    _close(np.asarray(flow.load(tmp_path / "g")(x)), Rows()(x).numpy())


def test_batch_baked_into_a_reshape_of_a_state_saves_with_a_note(tmp_path):
    class State(nn.Module):  # the batch read as a plain int: a state sized by it, then reshaped
        def forward(self, x):
            b = int(x.shape[0])
            return x + flow.zeros(1, b, 8).reshape(b, 8)

    graph = _TokenGraph(State())
    graph(flow.randn(4, 8))
    with pytest.warns(UserWarning, match="runs at batch size 4 only"):
        flow.save(graph, tmp_path / "g")
    manifest = json.loads((tmp_path / "g" / "flowserve.json").read_text())
    assert manifest["inputs"][0]["shape"] == [4, 8] and "'reshape'" in manifest["batch_note"]
    loaded = flow.load(tmp_path / "g")
    _close(np.asarray(loaded(flow.ones(4, 8))), np.ones((4, 8), np.float32))
    with pytest.raises(ShapeError, match="fixed by op 'reshape'"):
        loaded(flow.randn(5, 8))


# -- 4. names -------------------------------------------------------------------------------------


def test_output_names_never_collide_with_inputs(tmp_path):
    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 3)

        def build(self, x, lst, none, kw0=None, kw1=None):
            return {"kw0": kw0, "x": self.linear(x), "nested": [{"kw1": kw1 * 2}, lst[0], {"lst": lst[1]}]}

    g = G()
    args = (flow.randn(2, 3), [flow.randn(2, 3), flow.randn(2, 3)], None)
    kwargs = {"kw0": flow.randn(2, 3), "kw1": flow.randn(2, 3)}
    out = g(*args, **kwargs)
    _close(out["kw0"].numpy(), kwargs["kw0"].numpy())
    _close(out["nested"][0]["kw1"].numpy(), kwargs["kw1"].numpy() * 2)
    ir = g._last.traced.ir
    names = [v.name for v in ir.inputs] + [v.name for v in ir.outputs]
    assert len(names) == len(set(names))
    flow.save(g, tmp_path / "g")
    export(tmp_path / "g", tmp_path / "m.onnx")  # a valid ONNX model: no duplicate definitions


# -- 5. int32 labels --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [flow.int32, flow.int64])
def test_cross_entropy_with_int32_labels_in_graph(dtype):
    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.loss = nn.CrossEntropyLoss(label_smoothing=0.1)

        def build(self, x, y):
            return self.loss(x, y)

    x = flow.randn(6, 11)
    y = flow.tensor([1, 2, 3, 4, 10, 0], dtype=dtype)
    _close(float(G()(x, y)), float(nn.CrossEntropyLoss(label_smoothing=0.1)(x, y)))


def test_arange_of_the_batch_follows_it():
    class G(nn.Graph):
        def build(self, x):
            return x * flow.arange(x.shape[0]).unsqueeze(1).float() + flow.ones(x.shape[0], 1)

    graph = G()
    for batch in (3, 1, 6):
        x = flow.randn(batch, 4)
        _close(graph(x).numpy(), (x * flow.arange(batch).unsqueeze(1).float() + 1).numpy())


def test_indexing_along_the_batch_follows_it(tmp_path):
    """``logits[arange(B), targets]`` (picking one entry per sample, negative indices wrap)."""

    class G(nn.Graph):
        def build(self, logits, idx):
            return logits[flow.arange(logits.shape[0]), idx]

    graph = G()
    graph(flow.randn(3, 5), flow.tensor([0, 4, 2]))
    flow.save(graph, tmp_path / "g")
    loaded = flow.load(tmp_path / "g")
    logits, idx = flow.randn(6, 5), flow.tensor([1, -1, 0, 4, -2, 3])
    expected = logits.numpy()[np.arange(6), idx.numpy()]
    _close(graph(logits, idx).numpy(), expected)
    _close(loaded(logits, idx).numpy(), expected)
