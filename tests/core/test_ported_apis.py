"""The APIs real PyTorch/OneFlow models reach for, checked against PyTorch 2.13 (or OneFlow's
documented values), eagerly and in nn.Graph with export."""

from __future__ import annotations

import math
import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as TF

import flowserve as flow
import flowserve.nn as nn
import flowserve.nn.functional as F
from flowserve.exporter import export
from tests.precision import assert_close_in_format

RNG = np.random.default_rng(0)
X4 = RNG.standard_normal((2, 6, 7, 5)).astype(np.float32)


def _close(a, b, rtol=1e-5):
    a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(np.abs(b).max())))


FUNCTIONAL = [
    ("relu", {}), ("relu6", {}), ("elu", {"alpha": 0.7}), ("selu", {}), ("celu", {"alpha": 0.5}),
    ("leaky_relu", {"negative_slope": 0.2}), ("hardtanh", {"min_val": -0.5, "max_val": 0.5}), ("hardswish", {}),
    ("hardsigmoid", {}), ("silu", {}), ("mish", {}), ("softsign", {}), ("glu", {"dim": 1}),
    ("normalize", {"dim": 1}), ("normalize", {"p": 1.0, "dim": -1}), ("instance_norm", {}),
    ("unfold", {"kernel_size": 3, "padding": 1, "stride": 2}), ("unfold", {"kernel_size": (2, 3), "dilation": (2, 1)}),
    ("adaptive_max_pool2d", {"output_size": (3, 2)}), ("adaptive_max_pool2d", {"output_size": 1}),
    ("threshold", {"threshold": 0.1, "value": 20.0}),
]


@pytest.mark.parametrize("name,kw", FUNCTIONAL, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUNCTIONAL)])
def test_functional_matches_torch(name, kw):
    x, t = flow.tensor(X4, requires_grad=True), torch.tensor(X4, requires_grad=True)
    got, ref = getattr(F, name)(x, **kw), getattr(TF, name)(t, **kw)
    _close(got, ref)
    (got * got).sum().backward()
    (ref * ref).sum().backward()
    _close(x.grad, t.grad, rtol=1e-4)


def test_fold_pixel_shuffle_distances_match_torch():
    cols = RNG.standard_normal((2, 6 * 9, 12)).astype(np.float32)
    _close(F.fold(flow.tensor(cols), (7, 5), 3, padding=1, stride=2), TF.fold(torch.tensor(cols), (7, 5), 3, padding=1,
                                                                              stride=2))
    x = X4[:, :4]
    _close(F.pixel_shuffle(flow.tensor(x), 2), TF.pixel_shuffle(torch.tensor(x), 2))
    _close(F.pixel_unshuffle(flow.tensor(X4[:, :, :6, :4]), 2), TF.pixel_unshuffle(torch.tensor(X4[:, :, :6, :4]), 2))
    a, b = X4[0], X4[1] * 2 + 1
    _close(F.cosine_similarity(flow.tensor(a), flow.tensor(b)), TF.cosine_similarity(torch.tensor(a), torch.tensor(b)))
    _close(F.pairwise_distance(flow.tensor(a), flow.tensor(b)), TF.pairwise_distance(torch.tensor(a), torch.tensor(b)))


def test_inplace_activations_write_their_input():
    x = flow.tensor(X4.copy())
    out = F.relu(x, inplace=True)
    assert out is x and float(x.min()) == 0.0
    y = flow.tensor(X4.copy())
    F.leaky_relu_(y, 0.1)
    _close(y, TF.leaky_relu(torch.tensor(X4), 0.1))
    w = nn.Parameter(flow.ones(2))
    with pytest.raises(Exception, match="in-place"):
        F.relu(w, inplace=True)


MODULES = [
    ("InstanceNorm2d", (6,), {}), ("InstanceNorm2d", (6,), {"affine": True, "track_running_stats": True}),
    ("Unfold", (2,), {}), ("ZeroPad2d", ((1, 2, 0, 1),), {}),
    ("ReflectionPad2d", (1,), {}), ("ReplicationPad2d", (2,), {}), ("SELU", (), {}), ("CELU", (0.5,), {}),
    ("Threshold", (0.1, 2.0), {}), ("Softsign", (), {}), ("GLU", (1,), {}), ("Softmax2d", (), {}),
    ("PReLU", (6,), {}), ("AdaptiveMaxPool2d", ((2, 4),), {}), ("Unflatten", (1, (2, 3)), {}),
    ("Dropout2d", (0.5,), {}),
]


@pytest.mark.parametrize("name,args,kw", MODULES, ids=[m[0] + str(i) for i, m in enumerate(MODULES)])
def test_modules_match_torch(name, args, kw):
    mine, theirs = getattr(nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    if name == "Dropout2d":  # random: compare the rule, not the draw
        out = mine(flow.ones(8, 16, 3, 3)).numpy().reshape(8, 16, -1)
        assert set(np.unique(out)) <= {0.0, 2.0} and (out.std(-1) == 0).all()
        mine.eval()
        _close(mine(flow.tensor(X4)), X4)
        return
    for _ in range(2):  # twice: running statistics too
        got, ref = mine(flow.tensor(X4)), theirs(torch.tensor(X4))
    _close(got, ref)
    for (k, v), (_, tv) in zip(mine.state_dict().items(), theirs.state_dict().items()):
        _close(v, tv)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_matches_torch(norm_first):
    torch.manual_seed(0)
    twin = torch.nn.Transformer(16, 4, 2, 2, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    mine = nn.Transformer(16, 4, 2, 2, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    assert list(mine.state_dict()) == list(twin.state_dict())
    mine.load_state_dict({k: flow.tensor(v.numpy()) for k, v in twin.state_dict().items()})
    src, tgt = RNG.standard_normal((2, 7, 16)).astype(np.float32), RNG.standard_normal((2, 5, 16)).astype(np.float32)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    np.testing.assert_array_equal(mask.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(5).numpy())
    ref = twin(torch.tensor(src), torch.tensor(tgt), tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(5))
    _close(mine(flow.tensor(src), flow.tensor(tgt), tgt_mask=mask), ref)
    decoder = mine.decoder.layers[0]
    causal = decoder(flow.tensor(tgt), flow.tensor(src), tgt_is_causal=True)
    _close(causal, decoder(flow.tensor(tgt), flow.tensor(src), tgt_mask=mask))


def test_erfinv_and_trunc_normal_recipe():
    x = np.linspace(-0.999, 0.999, 2001).astype(np.float32)
    _close(flow.erfinv(flow.tensor(x)), torch.erfinv(torch.tensor(x)), rtol=2e-6)
    edges = flow.tensor([-1.0, 1.0, 1.5]).erfinv().numpy()
    assert edges[0] == -np.inf and edges[1] == np.inf and np.isnan(edges[2])
    t = flow.tensor([0.3, -0.7], dtype=flow.float64, requires_grad=True)
    t.erfinv().sum().backward()
    tt = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    tt.erfinv().sum().backward()
    _close(t.grad, tt.grad)
    w = flow.empty(20000)
    low, high = (1 + math.erf(-2 / math.sqrt(2))) / 2, (1 + math.erf(2 / math.sqrt(2))) / 2
    w.uniform_(2 * low - 1, 2 * high - 1).erfinv_().mul_(math.sqrt(2.0)).clamp_(min=-2, max=2)  # timm's recipe
    assert abs(float(w.std()) - 0.8796) < 0.02 and float(w.abs().max()) <= 2
    fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(flow.empty(8, 4, 3, 3))
    assert (fan_in, fan_out) == torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(8, 4, 3, 3))
    q = nn.init.orthogonal_(flow.empty(6, 4), gain=2.0).numpy()
    np.testing.assert_allclose(q.T @ q, 4 * np.eye(4), atol=1e-5)


def test_bernoulli_and_multinomial():
    flow.manual_seed(0)
    p = flow.full((20000,), 0.3)
    assert abs(float(flow.bernoulli(p).mean()) - 0.3) < 0.02
    gen = flow.Generator().manual_seed(5)
    a = flow.multinomial(flow.tensor([[0.1, 0.0, 0.9], [1.0, 1.0, 0.0]]), 2, generator=gen)
    b = flow.multinomial(flow.tensor([[0.1, 0.0, 0.9], [1.0, 1.0, 0.0]]), 2,
                         generator=flow.Generator().manual_seed(5))
    assert a.tolist() == b.tolist() and a.dtype is flow.int64
    assert sorted(a.tolist()[1]) == [0, 1] and 1 not in a.tolist()[0]  # without replacement, zero weight never
    draws = flow.multinomial(flow.tensor([0.2, 0.8]), 4000, replacement=True).numpy()
    assert abs(draws.mean() - 0.8) < 0.03
    with pytest.raises(RuntimeError, match="without replacement"):
        flow.multinomial(flow.tensor([0.5, 0.5]), 3)


def test_oneflow_schedulers_follow_their_documented_values():
    sched = flow.optim.lr_scheduler
    opt = flow.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.001)
    warm = sched.WarmUpLR(opt, warmup_factor=0.5, warmup_iters=5, warmup_method="linear")
    lrs = []
    for _ in range(7):
        lrs.append(warm.get_last_lr()[0])
        opt.step()
        warm.step()
    np.testing.assert_allclose(lrs, [0.0005, 0.0006, 0.0007, 0.0008, 0.0009, 0.001, 0.001], rtol=1e-9)
    opt = flow.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.001)
    cosine = sched.CosineDecayLR(opt, decay_steps=5, alpha=0.1)
    both = sched.WarmupLR(cosine, warmup_factor=0.5, warmup_iters=2)
    lrs = []
    for _ in range(8):
        lrs.append(both.get_last_lr()[0])
        opt.step()
        both.step()
    expect = [0.001 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(s, 5) / 5)) + 0.1) for s in range(8)]
    np.testing.assert_allclose(lrs[2:], expect[2:], rtol=1e-9)  # the cosine after warmup
    assert lrs[0] == pytest.approx(0.0005) and lrs[1] == pytest.approx((0.0005 + expect[2]) / 2)
    opt = flow.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    poly = sched.PolynomialLR(opt, decay_batch=4, end_learning_rate=0.01, power=2.0)
    lrs = []
    for _ in range(6):
        lrs.append(poly.get_last_lr()[0])
        opt.step()
        poly.step()
    np.testing.assert_allclose(lrs, [(0.1 - 0.01) * (1 - min(s, 4) / 4) ** 2 + 0.01 for s in range(6)], rtol=1e-9)


def test_compile_inference_training_and_fallback():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    fast = flow.compile(model.eval())
    x = flow.randn(3, 4)
    _close(fast(x), model(x))
    _close(fast(flow.randn(6, 4) * 0 + x[0]), model(flow.randn(6, 4) * 0 + x[0]))
    assert list(fast.state_dict()) == ["_orig_mod." + k for k in model.state_dict()]
    twin = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    twin.load_state_dict(model.state_dict())
    opt, twin_opt = flow.optim.Adam(model.parameters(), lr=0.01), flow.optim.Adam(twin.parameters(), lr=0.01)
    step = flow.compile(model.train(), optimizer=opt, loss_fn=nn.MSELoss())
    y = flow.randn(3, 2)
    for _ in range(3):
        step(x, y)
        twin_opt.zero_grad()
        nn.MSELoss()(twin(x), y).backward()
        twin_opt.step()
    for p, q in zip(model.parameters(), twin.parameters()):
        _close(p, q)

    class DataDependent(nn.Module):
        def forward(self, v):
            return v * 2 if float(v.sum()) > 0 else v

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        odd = flow.compile(DataDependent().eval())
        assert odd(flow.ones(2)).tolist() == [2.0, 2.0] and odd(-flow.ones(2)).tolist() == [-1.0, -1.0]
    assert sum("runs eagerly" in str(w.message) and "item()" in str(w.message) for w in caught) == 1


def test_missing_names_say_what_to_use():
    with pytest.raises(AttributeError, match=r"torch\.optim\.SparseAdam.*use Adam"):
        flow.optim.SparseAdam
    with pytest.raises(AttributeError, match=r"torch\.jit\.script.*nn\.Graph"):
        flow.jit.script
    with pytest.raises(AttributeError, match=r"'Tensor' object has no attribute 'storage'.*numpy\(\)"):
        flow.randn(2).storage
    assert not hasattr(flow.randn(2), "storage")
    with pytest.raises(AttributeError, match=r"'Tensor' object has no attribute 'frobnicate'"):
        flow.randn(2).frobnicate

    class G(nn.Graph):
        def build(self, v):
            return v.frobnicate

    with pytest.raises(AttributeError) as info:
        G()(flow.ones(2))
    assert "LazyTensor" not in str(info.value) and "'Tensor' object" in str(info.value)
    assert not hasattr(flow, "no_such_name") and hasattr(flow, "compile")


def test_backend_queries_and_switches():
    assert flow.backends.mps.is_available() is False and flow.backends.mps.is_built() is False
    assert flow.backends.cudnn.is_available() == flow.cuda.is_available()
    before = flow.backends.cudnn.benchmark
    flow.backends.cudnn.benchmark = True  # DCGAN's line: accepted
    flow.backends.cuda.matmul.allow_tf32 = False
    flow.backends.cudnn.benchmark = before


def test_tensor_layout_and_device_queries():
    t = flow.randn(3, 4)
    assert t.stride() == (4, 1) and t.t().stride() == (1, 4) and t.stride(0) == 4
    assert t.is_contiguous() and not t.t().is_contiguous() and t.t().contiguous().shape == (4, 3)
    assert t.is_global is False and t.is_xpu is False
    flow.cuda.manual_seed_all(3)
    a = flow.randn(2)
    flow.manual_seed(3)
    assert a.tolist() == flow.randn(2).tolist()


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        flow.manual_seed(1)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.InstanceNorm2d(8, affine=True)
        self.drop = nn.Dropout2d(0.3)
        self.act = nn.PReLU(8)
        self.up = nn.PixelShuffle(2)
        self.pool = nn.AdaptiveMaxPool2d((2, 3))
        self.theta = nn.Parameter(flow.tensor([[[0.9, 0.2, 0.1], [-0.1, 1.1, 0.0]]]))

    def forward(self, x):
        y = self.up(self.drop(self.act(self.norm(self.conv(x)))))
        cols = F.unfold(y, 2, stride=2)
        grid = F.affine_grid(self.theta.expand(x.shape[0], 2, 3), y.shape)
        warped = F.grid_sample(y, grid, align_corners=False)
        return self.pool(F.fold(cols, (8, 8), 2, stride=2) + F.normalize(y, dim=1) + warped)


def test_new_layers_in_a_graph_export_at_any_batch(tmp_path):
    model = _Net().eval()

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    graph = G()
    graph(flow.randn(2, 3, 4, 4))
    flow.save(graph, tmp_path / "net")
    export(tmp_path / "net", tmp_path / "net.onnx")
    session = ort.InferenceSession(str(tmp_path / "net.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        x = flow.randn(batch, 3, 4, 4)
        ref = model(x).numpy()
        _close(graph(x), ref)
        _close(session.run(None, {"x": x.numpy()})[0], ref)
    model.train()
    train_graph = G()
    first, second = train_graph(flow.ones(4, 3, 4, 4)), train_graph(flow.ones(4, 3, 4, 4))
    assert not np.array_equal(first.numpy(), second.numpy())  # Dropout2d draws per call


INTERPOLATE = [("bicubic", dict(size=(11, 9))), ("bicubic", dict(size=(4, 3), align_corners=True)),
               ("bicubic", dict(scale_factor=2)), ("area", dict(size=(3, 2))),
               ("nearest-exact", dict(size=(11, 3))), ("nearest-exact", dict(scale_factor=1.7))]


@pytest.mark.parametrize("mode,kw", INTERPOLATE, ids=[f"{m}-{i}" for i, (m, _) in enumerate(INTERPOLATE)])
def test_interpolate_modes_match_torch(mode, kw):
    x, t = flow.tensor(X4, requires_grad=True), torch.tensor(X4, requires_grad=True)
    got, ref = F.interpolate(x, mode=mode, **kw), TF.interpolate(t, mode=mode, **kw)
    _close(got, ref)
    got.sum().backward()
    ref.sum().backward()
    _close(x.grad, t.grad)
    up = nn.Upsample(scale_factor=2, mode=mode) if mode != "area" else nn.Upsample(size=(3, 2), mode=mode)
    tup = torch.nn.Upsample(scale_factor=2, mode=mode) if mode != "area" else torch.nn.Upsample(size=(3, 2), mode=mode)
    _close(up(flow.tensor(X4)), tup(torch.tensor(X4)))


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_and_affine_grid_match_torch(mode, padding_mode, align_corners):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = (rng.random((2, 4, 7, 2)) * 2.4 - 1.2).astype(np.float32)  # some points outside
    xs, gs = flow.tensor(x, requires_grad=True), flow.tensor(grid, requires_grad=True)
    xt, gt = torch.tensor(x, requires_grad=True), torch.tensor(grid, requires_grad=True)
    got = F.grid_sample(xs, gs, mode, padding_mode, align_corners)
    ref = TF.grid_sample(xt, gt, mode, padding_mode, align_corners)
    _close(got, ref)
    (got * got).sum().backward()
    (ref * ref).sum().backward()
    _close(xs.grad, xt.grad, rtol=1e-4)
    if mode == "bilinear":
        _close(gs.grad, gt.grad, rtol=1e-4)
    theta = rng.standard_normal((2, 2, 3)).astype(np.float32)
    _close(F.affine_grid(flow.tensor(theta), (2, 3, 4, 5), align_corners),
           TF.affine_grid(torch.tensor(theta), (2, 3, 4, 5), align_corners))


def test_autocast_rounds_compute_ops_like_torch_eager_and_in_graphs():
    rng = np.random.default_rng(3)
    flow.manual_seed(3)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    twin = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 6 * 6, 5))
    twin.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    with flow.autocast("cpu"):
        got = model(flow.tensor(x))
        assert flow.amp.is_autocast_enabled()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = twin(torch.tensor(x)).float()
    assert_close_in_format(got.numpy(), ref.detach().numpy(), "bfloat16", roundings=2)
    plain = model(flow.tensor(x)).numpy()
    assert np.abs(plain - got.numpy()).max() > 1e-4  # the rounding really happened
    assert not flow.amp.is_autocast_enabled()

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, v):
            with flow.autocast("cpu"):
                return self.model(v)

    _close(G()(flow.tensor(x)), got)  # the graph records the same roundings
    with flow.cuda.amp.autocast(enabled=False):
        _close(model(flow.tensor(x)), plain)
    scaler = flow.cuda.amp.GradScaler(enabled=False)
    loss = model(flow.tensor(x)).sum()
    assert scaler.scale(loss) is loss and scaler.get_scale() == 1.0


def test_fused_batch_norm_is_batch_norm_add_relu():
    flow.manual_seed(2)
    fused, plain = nn.FusedBatchNorm2d(6), nn.BatchNorm2d(6)
    assert list(fused.state_dict()) == list(plain.state_dict())
    addend = flow.tensor(RNG.standard_normal(X4.shape).astype(np.float32))
    _close(fused(flow.tensor(X4), addend), F.relu(plain(flow.tensor(X4)) + addend))
    _close(fused.running_var, plain.running_var)


def test_compile_trains_on_the_models_own_loss():
    class WithLoss(nn.Module):
        """nanoGPT's habit: forward(x, targets) returns (logits, loss)."""

        def __init__(self):
            super().__init__()
            flow.manual_seed(7)
            self.head = nn.Linear(4, 3)

        def forward(self, x, targets):
            logits = self.head(x)
            return logits, F.cross_entropy(logits, targets)

    model, twin = WithLoss(), WithLoss()
    opt, twin_opt = flow.optim.SGD(model.parameters(), lr=0.5), flow.optim.SGD(twin.parameters(), lr=0.5)
    step = flow.compile(model, optimizer=opt)
    x, y = flow.randn(6, 4), flow.tensor([0, 1, 2, 0, 1, 2])
    for _ in range(3):
        logits, loss = step(x, y)
        twin_opt.zero_grad()
        ref_logits, ref_loss = twin(x, y)
        ref_loss.backward()
        twin_opt.step()
        _close(loss, ref_loss.detach())
        _close(logits, ref_logits.detach())
    _close(model.head.weight, twin.head.weight)


CONV3D = [dict(groups=2), dict(stride=2, padding=1, groups=2),
          dict(stride=(1, 2, 1), padding=(2, 0, 1), dilation=(2, 1, 1), groups=2)]


@pytest.mark.parametrize("kw", CONV3D, ids=["plain", "strided-grouped", "dilated"])
def test_conv3d_and_3d_pooling_match_torch(kw):
    x = RNG.standard_normal((2, 4, 6, 7, 5)).astype(np.float32)
    w = RNG.standard_normal((6, 2, 3, 2, 3)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    xs, ws = flow.tensor(x, requires_grad=True), flow.tensor(w, requires_grad=True)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    got = F.conv3d(xs, ws, flow.tensor(b), **kw)
    ref = TF.conv3d(xt, wt, torch.tensor(b), **kw)
    _close(got, ref, rtol=1e-4)
    (got * got).sum().backward()
    (ref * ref).sum().backward()
    _close(xs.grad, xt.grad, rtol=1e-4)
    _close(ws.grad, wt.grad, rtol=1e-4)
    for pool_kw in (dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)):
        _close(F.max_pool3d(flow.tensor(x), **pool_kw), TF.max_pool3d(torch.tensor(x), **pool_kw))
        _close(F.avg_pool3d(flow.tensor(x), **pool_kw), TF.avg_pool3d(torch.tensor(x), **pool_kw))


def test_3d_modules_match_torch_and_export(tmp_path):
    torch.manual_seed(0)
    twin = torch.nn.Sequential(torch.nn.Conv3d(3, 4, 3, padding=1), torch.nn.BatchNorm3d(4), torch.nn.ReLU(),
                               torch.nn.MaxPool3d(2), torch.nn.Conv3d(4, 2, 1)).eval()
    model = nn.Sequential(nn.Conv3d(3, 4, 3, padding=1), nn.BatchNorm3d(4), nn.ReLU(), nn.MaxPool3d(2),
                          nn.Conv3d(4, 2, 1)).eval()
    assert list(model.state_dict()) == list(twin.state_dict())
    model.load_state_dict({k: flow.tensor(v.numpy()) for k, v in twin.state_dict().items()})

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    graph = G()
    graph(flow.randn(2, 3, 4, 6, 6))
    flow.save(graph, tmp_path / "c3")
    export(tmp_path / "c3", tmp_path / "c3.onnx")
    session = ort.InferenceSession(str(tmp_path / "c3.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        x = RNG.standard_normal((batch, 3, 4, 6, 6)).astype(np.float32)
        with torch.no_grad():
            ref = twin(torch.tensor(x)).numpy()
        _close(model(flow.tensor(x)), ref, rtol=1e-4)
        _close(session.run(None, {"x": x})[0], ref, rtol=1e-4)
