"""The ``torch.nn`` / ``torch.nn.functional`` / ``torch.*`` names filled after
``bench/api_coverage.py`` listed them missing: forward and gradients against PyTorch 2.13, one
line per case (``lib`` is ``flowserve`` or ``torch``, ``F`` its functional namespace)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flowserve as flow
import flowserve.nn.functional as F

RNG = np.random.default_rng(3)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def signs(*shape):
    return np.where(RNG.random(shape) < 0.5, -1.0, 1.0).astype(np.float32)


X, Y, Z = normal(4, 6), normal(4, 6), normal(4, 6)
IMG, SEQ = normal(2, 6, 5, 5), normal(2, 4, 9)
POS = np.abs(normal(4, 6)) + 0.1
COUNTS = RNG.integers(0, 5, (4, 6)).astype(np.float32)

# (name, fn(lib, F, *tensors), inputs): the inputs before the targets (TARGETS[name] of them at
# the end, none where not listed) get gradients
CASES = [
    ("softshrink", lambda lib, F, x: F.softshrink(x, 0.3), [X]),
    ("hardshrink", lambda lib, F, x: F.hardshrink(x, 0.3), [X]),
    ("tanhshrink", lambda lib, F, x: F.tanhshrink(x), [X]),
    ("softmin", lambda lib, F, x: F.softmin(x, dim=1), [X]),
    ("rms_norm", lambda lib, F, x, w: F.rms_norm(x, (6,), w), [X, POS[0]]),
    ("rms_norm_eps", lambda lib, F, x: F.rms_norm(x, [4, 6], eps=1e-3), [X]),
    ("avg_pool1d", lambda lib, F, x: F.avg_pool1d(x, 3, 2, 1), [SEQ]),
    ("adaptive_avg_pool1d", lambda lib, F, x: F.adaptive_avg_pool1d(x, 4), [SEQ]),
    ("max_pool1d_with_indices", lambda lib, F, x: F.max_pool1d(x, 3, 2, return_indices=True), [SEQ]),
    ("lp_pool1d", lambda lib, F, x: F.lp_pool1d(x, 2, 3), [np.abs(SEQ) + 0.1]),
    ("lp_pool2d", lambda lib, F, x: F.lp_pool2d(x, 3, 2), [np.abs(IMG) + 0.1]),
    ("channel_shuffle", lambda lib, F, x: lib.nn.ChannelShuffle(3)(x), [IMG]),
    ("upsample_nearest", lambda lib, F, x: F.upsample_nearest(x, scale_factor=2), [IMG]),
    ("upsample_bilinear", lambda lib, F, x: F.upsample_bilinear(x, size=(7, 8)), [IMG]),
    ("margin_ranking_loss", lambda lib, F, a, b, y: F.margin_ranking_loss(a, b, y, 0.2), [X[0], Y[0], signs(6)]),
    ("hinge_embedding_loss", lambda lib, F, x, y: F.hinge_embedding_loss(x, y, 0.5, reduction="sum"),
     [X, signs(4, 6)]),
    ("soft_margin_loss", lambda lib, F, x, y: F.soft_margin_loss(x, y), [X, signs(4, 6)]),
    ("cosine_embedding_loss", lambda lib, F, a, b, y: F.cosine_embedding_loss(a, b, y, 0.1, reduction="none"),
     [X, Y, signs(4)]),
    ("triplet_margin_loss", lambda lib, F, a, p, n: F.triplet_margin_loss(a, p, n, swap=True), [X, Y, Z]),
    ("poisson_nll_loss", lambda lib, F, x, y: F.poisson_nll_loss(x, y), [X, COUNTS]),
    ("poisson_nll_loss_full", lambda lib, F, x, y: F.poisson_nll_loss(x, y, log_input=False, full=True),
     [POS, COUNTS]),
    ("gaussian_nll_loss", lambda lib, F, x, y, v: F.gaussian_nll_loss(x, y, v, full=True), [X, Y, POS]),
    ("gaussian_nll_loss_var", lambda lib, F, x, y, v: F.gaussian_nll_loss(x, y, v), [X, Y, POS[:, 0]]),
    ("multilabel_soft_margin_loss", lambda lib, F, x, y: F.multilabel_soft_margin_loss(x, y),
     [X, (COUNTS > 2).astype(np.float32)]),
    ("prelu", lambda lib, F, x, w: (F.prelu(x, w), F.prelu(x, w[:1])), [IMG, POS[0]]),
    ("inplace", lambda lib, F, x: (F.selu_(x * 1), F.celu_(x * 1, 0.5), F.threshold_(x * 1, 0.1, -2.0)), [X]),
    ("bilinear", lambda lib, F, a, b, w, c: F.bilinear(a, b, w, c), [X[:, :4], Y[:, :5], normal(3, 4, 5), normal(3)]),
    ("RMSNorm", lambda lib, F, x: lib.nn.RMSNorm(6)(x), [X]),
    ("Softmin", lambda lib, F, x: lib.nn.Softmin(0)(x), [X]),
    ("AvgPool1d", lambda lib, F, x: lib.nn.AvgPool1d(2)(x), [SEQ]),
    ("LPPool2d", lambda lib, F, x: lib.nn.LPPool2d(2, 2)(x), [np.abs(IMG) + 0.1]),
    ("pads_1d", lambda lib, F, x: (lib.nn.ZeroPad1d(2)(x), lib.nn.ConstantPad1d((1, 2), 3.5)(x),
                                   lib.nn.ReflectionPad1d(2)(x), lib.nn.ReplicationPad1d((0, 3))(x)), [SEQ]),
    ("losses", lambda lib, F, a, b, c, y: (
        lib.nn.MarginRankingLoss(0.1)(a[0], b[0], y[0]), lib.nn.HingeEmbeddingLoss()(a, y),
        lib.nn.SoftMarginLoss()(a, y), lib.nn.CosineEmbeddingLoss()(a, b, y[:, 0]),
        lib.nn.TripletMarginLoss(p=1.0)(a, b, c), lib.nn.PoissonNLLLoss()(a, b.abs()),
        lib.nn.GaussianNLLLoss()(a, b, c.abs() + 0.1), lib.nn.MultiLabelSoftMarginLoss()(a, (y > 0).float())),
     [X, Y, Z, signs(4, 6)]),
]


M3, V3, B3 = normal(3, 4), normal(4), normal(2, 3, 4)
NANS = np.array([[1.0, np.nan, -np.inf], [np.inf, 2.0, np.nan]], np.float32)
UNIT = RNG.uniform(0.05, 0.95, (4, 6)).astype(np.float32)
CASES += [  # torch.* and Tensor methods
    ("aliases", lambda lib, F, x, y: (lib.absolute(x), lib.multiply(x, y), lib.subtract(x, y, alpha=2), x.negative(),
                                      lib.greater(x, y), x.less_equal(y), lib.not_equal(x, y), lib.positive(x),
                                      lib.concatenate([x, y], 1), lib.swapaxes(x, 0, 1), x.swapdims(1, 0),
                                      lib.clamp_min(x, 0.1), lib.clamp_max(x, 0.1)), [X, Y]),
    ("movedim", lambda lib, F, x: (lib.movedim(x, 0, -1), x.moveaxis([0, 1], [2, 0]), lib.ravel(x),
                                   x.unflatten(0, (2, 3)), lib.fliplr(x), lib.flipud(x)), [IMG[0]]),
    ("stacks", lambda lib, F, a, b: (lib.hstack([a, b]), lib.vstack([a, b]), lib.dstack([a, b]),
                                     lib.column_stack([a[0], b[0]]), lib.row_stack([a[0], b[0]]),
                                     *lib.atleast_3d(a[0], a), lib.atleast_2d(a[0, 0]), lib.atleast_1d(a[0, 0]),
                                     *lib.broadcast_tensors(a[:1], b[:, :1])), [X, Y]),
    ("cartesian_prod", lambda lib, F, a, b: lib.cartesian_prod(a, b), [V3, normal(3)]),
    ("addmm_family", lambda lib, F, m, v, b, x: (
        lib.addmm(m[:, :3], m, m.T[:, :3], beta=0.5, alpha=2), lib.addmv(m[:, 0], m, v, alpha=3),
        lib.baddbmm(b[:, :, :3], b, b.transpose(1, 2)[:, :, :3], beta=0.0), m.addcmul(m, m * 2, value=0.5),
        lib.addcdiv(v, v, v.abs() + 1, value=2), lib.lerp(v, v * 3, 0.3), v.lerp(v * 3, 0.7),
        lib.mv(m, v), lib.inner(m, m), lib.vdot(v, v), lib.trace(m)), [M3, V3, B3, X]),
    ("math", lambda lib, F, x, y, u: (lib.sinh(x), x.cosh(), lib.deg2rad(x), lib.rad2deg(x), lib.logaddexp(x, y * 30),
                                      lib.logaddexp2(x, y), lib.hypot(x, y), lib.logit(u), u.logit(eps=0.1),
                                      lib.xlogy(x.clamp(min=0), u)), [X, Y, UNIT]),
    ("nan", lambda lib, F, x: (lib.nan_to_num(x), x.nan_to_num(nan=1.0, posinf=5.0), lib.nansum(x), x.nanmean(1)),
     [NANS]),
    ("counts", lambda lib, F, x: (lib.count_nonzero(x.relu()), lib.count_nonzero(x.relu(), dim=1),
                                  lib.tril_indices(4, 3, -1), lib.triu_indices(3, 5, 1)), [X]),
]

TARGETS = {"margin_ranking_loss": 1, "hinge_embedding_loss": 1, "soft_margin_loss": 1, "cosine_embedding_loss": 1,
           "poisson_nll_loss": 1, "poisson_nll_loss_full": 1, "multilabel_soft_margin_loss": 1, "losses": 1}


def _run(lib, fn, arrays, targets):
    tensors = [lib.tensor(a, requires_grad=i < len(arrays) - targets) for i, a in enumerate(arrays)]
    out = fn(lib, F if lib is flow else TF, *tensors)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    floats = [o for o in out if o.dtype.is_floating_point]
    if any(o.requires_grad for o in floats):
        sum(o.float().sum() * (i + 1) for i, o in enumerate(floats)).backward()
    return out, [t.grad for t in tensors]


@pytest.mark.parametrize("fn,arrays,targets", [pytest.param(fn, arrays, TARGETS.get(name, 0), id=name)
                                               for name, fn, arrays in CASES])
def test_forward_and_gradients_match_torch(fn, arrays, targets):
    got, got_grads = _run(flow, fn, arrays, targets)
    ref, ref_grads = _run(torch, fn, arrays, targets)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert tuple(g.shape) == tuple(r.shape)
        np.testing.assert_allclose(g.detach().numpy(), r.detach().numpy(), rtol=1e-5, atol=1e-5)
    for g, r in zip(got_grads, ref_grads):
        if r is not None and not np.isnan(r.numpy()).any():
            np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-5)


def test_predicates_and_attributes_match_torch():
    for lib in (flow, torch):
        x = lib.tensor(X)
        assert lib.is_floating_point(x) and not lib.is_complex(x) and lib.is_nonzero(lib.tensor([2]))
        assert (x.ndimension(), x.itemsize, x.nbytes) == (2, 4, 96)
        assert str(x.byte().dtype).split(".")[-1] == "uint8" and str(x.short().dtype).split(".")[-1] == "int16"
    assert flow.get_default_dtype() == flow.float32


def test_bilinear_layer_has_torchs_parameters():
    mine, theirs = flow.nn.Bilinear(4, 5, 3), torch.nn.Bilinear(4, 5, 3)
    assert {k: tuple(v.shape) for k, v in mine.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert float(mine.weight.abs().max()) <= 0.5  # uniform(-1/sqrt(in1), 1/sqrt(in1))
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in mine.state_dict().items()})
    a, b = normal(2, 4), normal(2, 5)
    np.testing.assert_allclose(mine(flow.tensor(a), flow.tensor(b)).numpy(),
                               theirs(torch.tensor(a), torch.tensor(b)).detach().numpy(), rtol=1e-5, atol=1e-6)
