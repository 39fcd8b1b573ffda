"""nn modules and functionals against PyTorch: the same weights (copied through state_dict),
the same random inputs, then outputs, input gradients, parameter gradients and buffers
(rtol 1e-5, atol 1e-5 * max|ref|, float32), in training and eval mode."""

from __future__ import annotations

import contextvars
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn.functional as F
from flowserve.errors import DTypeError, ShapeError
from flowserve.ops import conv_kernels

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
TF = torch.nn.functional


def ints(shape, low=0, high=5):
    return lambda rng: rng.integers(low, high, shape).astype(np.int64)


def bools(shape, p=0.3):
    return lambda rng: rng.random(shape) < p


def probs(shape, axis=1):
    def sample(rng):
        e = np.exp(rng.standard_normal(shape))
        return (e / e.sum(axis, keepdims=True)).astype(np.float32)

    return sample


def unit(shape):
    return lambda rng: rng.uniform(0.05, 0.95, shape).astype(np.float32)


def scaled(shape, s):
    return lambda rng: (rng.standard_normal(shape) * s).astype(np.float32)


def arrays(specs, rng):
    return [s(rng) if callable(s) else rng.standard_normal(s).astype(np.float32) for s in specs]


def assert_close(got, ref, what):
    ref = ref.detach().numpy() if hasattr(ref, "detach") else np.asarray(ref)
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != torch {ref.shape}"
    if ref.dtype.kind in "iub":
        np.testing.assert_array_equal(got, ref, err_msg=what)
    else:
        atol = 1e-5 * max(1.0, float(np.nanmax(np.abs(ref))) if ref.size else 1.0)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=atol, err_msg=what)


def _outputs(out):
    return [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]


def run_both(f_fn, t_fn, specs, seed=0, f_params=(), t_params=()):
    """Call both sides on the same inputs; compare outputs, input and parameter gradients."""
    rng = np.random.default_rng(seed)
    data = arrays(specs, rng)
    f_in = [flow.tensor(a, requires_grad=a.dtype.kind == "f") for a in data]
    t_in = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in data]
    f_out, t_out = _outputs(f_fn(*f_in)), _outputs(t_fn(*t_in))
    assert len(f_out) == len(t_out)
    for i, (fo, to) in enumerate(zip(f_out, t_out)):
        assert_close(fo, to, f"output {i}")
    pairs = [(fo, to) for fo, to in zip(f_out, t_out) if to.requires_grad]
    if not pairs:
        return
    cot = [rng.standard_normal(tuple(to.shape)).astype(np.float32) for _, to in pairs]
    torch.autograd.backward([to for _, to in pairs], [torch.tensor(c) for c in cot])
    sum((fo * flow.tensor(c)).sum() for (fo, _), c in zip(pairs, cot)).backward()
    for i, (fx, tx) in enumerate(zip(f_in, t_in)):
        if tx.grad is not None:
            assert_close(fx.grad, tx.grad, f"gradient of input {i}")
    for (name, fp), tp in zip(f_params, t_params):
        if tp.grad is not None:
            assert fp.grad is not None, f"no gradient for parameter {name}"
            assert_close(fp.grad, tp.grad, f"gradient of {name}")


def copy_torch_to_flow(t_mod, f_mod):
    f_mod.load_state_dict({k: flow.tensor(v.detach().numpy()) for k, v in t_mod.state_dict().items()})


def make_pair(name, args, kwargs):
    t_mod = getattr(torch.nn, name)(*args, **kwargs)
    f_mod = getattr(flow.nn, name)(*args, **kwargs)
    assert list(f_mod.state_dict()) == list(t_mod.state_dict()), f"{name} state_dict keys differ from PyTorch's"
    copy_torch_to_flow(t_mod, f_mod)
    return t_mod, f_mod


def check_module(name, args, kwargs, specs, train=True, calls=1, call_kwargs=None):
    t_mod, f_mod = make_pair(name, args, kwargs)
    t_mod.train(train), f_mod.train(train)
    ck = call_kwargs or {}
    for call in range(calls):
        run_both(lambda *x: f_mod(*x, **ck), lambda *x: t_mod(*x, **ck), specs, seed=call,
                 f_params=list(f_mod.named_parameters()), t_params=[p for _, p in t_mod.named_parameters()])
        for p in list(f_mod.parameters()) + list(t_mod.parameters()):
            p.grad = None
    for (key, fv), tv in zip(f_mod.state_dict().items(), t_mod.state_dict().values()):
        assert_close(fv, tv, f"{name} buffer/parameter {key} after {calls} call(s)")


MODULE_CASES = [
    ("Conv1d", (3, 4, 3), dict(stride=2, padding=1), [(2, 3, 9)]),
    ("Conv1d", (4, 6, 2), dict(padding="same", dilation=3, groups=2), [(2, 4, 7)]),
    ("Conv2d", (3, 4, 3), dict(padding=1), [(2, 3, 6, 5)]),
    ("Conv2d", (4, 6, (3, 2)), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2), [(2, 4, 7, 6)]),
    ("Conv2d", (4, 8, 3), dict(stride=2, padding=1, groups=4, bias=False), [(2, 4, 7, 7)]),
    # depthwise: channels-last below 256 output pixels (strided, dilated), NCHW from there
    ("Conv2d", (6, 6, 3), dict(stride=2, padding=1, groups=6), [(2, 6, 7, 5)]),
    ("Conv2d", (4, 4, (3, 2)), dict(padding=(2, 1), dilation=(2, 1), groups=4), [(1, 4, 6, 6)]),
    ("Conv2d", (4, 4, (3, 2)), dict(padding=(2, 1), dilation=(2, 1), groups=4), [(2, 4, 18, 17)]),
    ("Conv2d", (6, 3, (9, 8)), dict(stride=(1, 2), padding=1, groups=3), [(1, 6, 10, 12)]),  # few outputs
    ("Conv2d", (3, 4, 2), dict(padding="same", dilation=2), [(1, 3, 5, 6)]),
    ("Conv2d", (3, 5, 1), dict(stride=2), [(2, 3, 5, 5)]),
    ("Conv2d", (2, 3, 3), dict(padding="valid"), [(1, 2, 3, 3)]),
    ("Conv2d", (3, 4, 3), dict(padding=(1, 2), padding_mode="reflect"), [(2, 3, 5, 6)]),
    ("Conv2d", (3, 4, 3), dict(stride=2, padding=1, padding_mode="replicate"), [(2, 3, 5, 6)]),
    ("Conv1d", (3, 4, 4), dict(padding="same", padding_mode="circular"), [(2, 3, 7)]),
    ("ConvTranspose2d", (4, 3, 3), dict(stride=2, padding=1, output_padding=1), [(2, 4, 3, 4)]),
    ("ConvTranspose2d", (4, 6, 2), dict(stride=(2, 1), groups=2, dilation=2, bias=False), [(1, 4, 3, 3)]),
    ("ConvTranspose1d", (3, 2, 3), dict(stride=3, padding=1, output_padding=2), [(2, 3, 4)]),
    ("BatchNorm1d", (5,), {}, [(4, 5)]),
    ("BatchNorm1d", (3,), dict(momentum=None), [(4, 3, 6)]),
    ("BatchNorm2d", (4,), {}, [(3, 4, 5, 5)]),
    ("BatchNorm2d", (4,), dict(affine=False, momentum=0.3), [(2, 4, 3, 3)]),
    ("BatchNorm2d", (4,), dict(track_running_stats=False), [(2, 4, 3, 3)]),
    ("LayerNorm", (8,), {}, [(2, 3, 8)]),
    ("LayerNorm", ((3, 8),), dict(eps=1e-3, bias=False), [(2, 3, 8)]),
    ("GroupNorm", (2, 6), {}, [(2, 6, 3, 3)]),
    ("GroupNorm", (3, 3), dict(affine=False), [(2, 3, 5)]),
    ("MaxPool2d", (3, 2, 1), {}, [(2, 3, 7, 8)]),
    ("MaxPool2d", (2,), {}, [(1, 2, 6, 6)]),
    ("MaxPool2d", ((3, 2), 2), dict(ceil_mode=True), [(1, 2, 7, 6)]),
    ("MaxPool1d", (3, 2), dict(padding=1), [(2, 3, 9)]),
    ("AvgPool2d", (3, 2, 1), {}, [(2, 3, 7, 8)]),
    ("AvgPool2d", (3, 2, 1), dict(count_include_pad=False, ceil_mode=True), [(1, 2, 6, 7)]),
    ("AvgPool2d", (2,), dict(divisor_override=3), [(1, 2, 4, 4)]),
    ("AdaptiveAvgPool2d", ((1, 1),), {}, [(2, 8, 4, 4)]),
    ("AdaptiveAvgPool2d", ((3, 5),), {}, [(2, 2, 7, 10)]),
    ("AdaptiveAvgPool2d", (2,), {}, [(1, 2, 6, 4)]),
    ("AdaptiveAvgPool2d", ((1, 1),), {}, [(2, 8, 1, 1)]),  # windows of one pixel: a copy
    ("AdaptiveAvgPool2d", ((4, None),), {}, [(2, 3, 4, 3)]),
    ("Upsample", (), dict(scale_factor=2), [(1, 2, 3, 4)]),
    ("Upsample", (), dict(size=(5, 7)), [(1, 2, 3, 4)]),
    ("Upsample", (), dict(size=(5, 7), mode="bilinear"), [(1, 2, 3, 4)]),
    ("Upsample", (), dict(scale_factor=2, mode="bilinear", align_corners=True), [(1, 2, 3, 4)]),
    ("UpsamplingBilinear2d", (), dict(scale_factor=3), [(1, 1, 2, 3)]),
    ("Embedding", (10, 4), dict(padding_idx=1), [ints((3, 5), 0, 10)]),
    ("Embedding", (6, 3), {}, [ints((7,), 0, 6)]),
    ("Dropout", (0.0,), {}, [(3, 4)]),
    ("Identity", (), {}, [(3, 4)]),
    ("Linear", (5, 3), {}, [(2, 4, 5)]),
    ("ReLU", (), {}, [(3, 4)]),
    ("ReLU6", (), {}, [scaled((4, 5), 5.0)]),
    ("LeakyReLU", (0.2,), {}, [(3, 4)]),
    ("ELU", (0.7,), {}, [(3, 4)]),
    ("GELU", (), {}, [scaled((3, 4), 3.0)]),
    ("GELU", ("tanh",), {}, [scaled((3, 4), 3.0)]),
    ("SiLU", (), {}, [(3, 4)]),
    ("Mish", (), {}, [(3, 4)]),
    ("Sigmoid", (), {}, [(3, 4)]),
    ("Tanh", (), {}, [(3, 4)]),
    ("Softplus", (2.0, 5.0), {}, [scaled((3, 4), 4.0)]),
    ("LogSigmoid", (), {}, [(3, 4)]),
    ("Softmax", (1,), {}, [(2, 5, 3)]),
    ("LogSoftmax", (-1,), {}, [(2, 5)]),
    ("Hardswish", (), {}, [scaled((4, 5), 4.0)]),
    ("Hardsigmoid", (), {}, [scaled((4, 5), 4.0)]),
    ("Hardtanh", (-0.5, 0.7), {}, [(3, 4)]),
]


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name,args,kwargs,specs", MODULE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(MODULE_CASES)])
def test_module_matches_torch(name, args, kwargs, specs, train):
    calls = 2 if name.startswith("BatchNorm") else 1
    check_module(name, args, kwargs, specs, train, calls)


ATTENTION_CASES = [
    (dict(batch_first=True), [(2, 5, 8)] * 3, {}),
    (dict(batch_first=False), [(5, 2, 8), (4, 2, 8), (4, 2, 8)], dict(average_attn_weights=False)),
    (dict(batch_first=True), [(2, 5, 8)] * 3, dict(need_weights=False)),
    (dict(batch_first=True, kdim=6, vdim=4), [(2, 3, 8), (2, 5, 6), (2, 5, 4)], {}),
    (dict(batch_first=True, bias=False), [(5, 8)] * 3, {}),
]


@pytest.mark.parametrize("kwargs,specs,call_kwargs", ATTENTION_CASES)
def test_multihead_attention_matches_torch(kwargs, specs, call_kwargs):
    check_module("MultiheadAttention", (8, 2), kwargs, specs, train=True, call_kwargs=call_kwargs)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_masks(batch_first):
    t_mod, f_mod = make_pair("MultiheadAttention", (8, 4), dict(batch_first=batch_first))
    rng = np.random.default_rng(3)
    kpm = np.zeros((2, 6), dtype=bool)
    kpm[0, 4:] = True
    bool_mask = np.triu(np.ones((5, 6), dtype=bool), 2)
    float_mask = rng.standard_normal((2 * 4, 5, 6)).astype(np.float32)
    for attn_mask in (bool_mask, float_mask):
        ck = dict(key_padding_mask=kpm, attn_mask=attn_mask)
        shapes = [(2, 5, 8), (2, 6, 8), (2, 6, 8)] if batch_first else [(5, 2, 8), (6, 2, 8), (6, 2, 8)]
        run_both(lambda q, k, v: f_mod(q, k, v, key_padding_mask=flow.tensor(kpm), attn_mask=flow.tensor(attn_mask)),
                 lambda q, k, v: t_mod(q, k, v, key_padding_mask=torch.tensor(kpm), attn_mask=torch.tensor(attn_mask)),
                 shapes, f_params=list(f_mod.named_parameters()), t_params=[p for _, p in t_mod.named_parameters()])
        assert ck  # both masks were applied through the call above


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation,batch_first", [("relu", True), ("gelu", False)])
def test_transformer_encoder_layer_matches_torch(norm_first, activation, batch_first):
    kwargs = dict(dim_feedforward=16, dropout=0.0, activation=activation, batch_first=batch_first,
                  norm_first=norm_first)
    shape = (2, 5, 8) if batch_first else (5, 2, 8)
    check_module("TransformerEncoderLayer", (8, 2), kwargs, [shape], train=True)
    kpm = np.zeros((2, 5), dtype=bool)
    kpm[1, 3:] = True
    t_mod, f_mod = make_pair("TransformerEncoderLayer", (8, 2), kwargs)
    run_both(lambda x: f_mod(x, src_key_padding_mask=flow.tensor(kpm)),
             lambda x: t_mod(x, src_key_padding_mask=torch.tensor(kpm)), [shape],
             f_params=list(f_mod.named_parameters()), t_params=[p for _, p in t_mod.named_parameters()])


def test_transformer_encoder_stacks_copies():
    f_layer = flow.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    f_enc = flow.nn.TransformerEncoder(f_layer, 2, norm=flow.nn.LayerNorm(8))
    t_enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
                                        2, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    assert list(f_enc.state_dict()) == list(t_enc.state_dict())
    copy_torch_to_flow(t_enc, f_enc)
    run_both(f_enc, t_enc, [(2, 4, 8)], f_params=list(f_enc.named_parameters()),
             t_params=[p for _, p in t_enc.named_parameters()])


# -- functional forms ---------------------------------------------------------------------

FUNCTIONAL_CASES = [
    ("conv2d", lambda m, x, w, b: m.conv2d(x, w, b, stride=2, padding=1), [(2, 3, 7, 7), (4, 3, 3, 3), (4,)]),
    ("conv1d_same", lambda m, x, w: m.conv1d(x, w, padding="same"), [(2, 3, 7), (4, 3, 4)]),
    ("conv_transpose2d", lambda m, x, w: m.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
     [(1, 3, 4, 4), (3, 2, 3, 3)]),
    ("max_pool2d_indices", lambda m, x: m.max_pool2d(x, 2, return_indices=True), [(2, 3, 6, 6)]),
    ("avg_pool2d", lambda m, x: m.avg_pool2d(x, 3, 1, 1), [(1, 2, 5, 5)]),
    ("adaptive_avg_pool2d", lambda m, x: m.adaptive_avg_pool2d(x, (2, 3)), [(2, 2, 5, 7)]),
    ("interpolate_nearest", lambda m, x: m.interpolate(x, scale_factor=1.5), [(1, 2, 4, 6)]),
    ("interpolate_linear", lambda m, x: m.interpolate(x, size=7, mode="linear"), [(1, 2, 4)]),
    ("embedding", lambda m, i, w: m.embedding(i, w, padding_idx=0), [ints((2, 3), 0, 6), (6, 4)]),
    ("dropout_eval", lambda m, x: m.dropout(x, 0.5, training=False), [(3, 4)]),
    ("pad_constant", lambda m, x: m.pad(x, (1, 2, 0, 3), value=0.5), [(2, 3, 4, 5)]),
    ("pad_crop", lambda m, x: m.pad(x, (-1, 2, 1, -2)), [(2, 3, 4, 5)]),
    ("pad_reflect", lambda m, x: m.pad(x, (2, 1, 3, 0), mode="reflect"), [(1, 2, 4, 5)]),
    ("pad_replicate", lambda m, x: m.pad(x, (2, 3), mode="replicate"), [(2, 3, 4)]),
    ("pad_circular", lambda m, x: m.pad(x, (1, 4, 2, 2), mode="circular"), [(1, 2, 4, 5)]),
    ("batch_norm_eval", lambda m, x, rm, rv, w, b: m.batch_norm(x, rm.detach(), rv.detach().abs() + 0.5, w, b),
     [(3, 4, 2), (4,), (4,), (4,), (4,)]),
    ("layer_norm", lambda m, x, w, b: m.layer_norm(x, (5,), w, b), [(2, 3, 5), (5,), (5,)]),
    ("group_norm", lambda m, x: m.group_norm(x, 2), [(2, 4, 3)]),
    ("gelu", lambda m, x: m.gelu(x), [(3, 4)]),
    ("gelu_tanh", lambda m, x: m.gelu(x, approximate="tanh"), [(3, 4)]),
    ("relu6", lambda m, x: m.relu6(x), [scaled((3, 4), 5.0)]),
    ("leaky_relu", lambda m, x: m.leaky_relu(x, 0.1), [(3, 4)]),
    ("silu", lambda m, x: m.silu(x), [(3, 4)]),
    ("hardswish", lambda m, x: m.hardswish(x), [scaled((3, 4), 4.0)]),
    ("softmax", lambda m, x: m.softmax(x, dim=0), [(3, 4)]),
    ("log_softmax", lambda m, x: m.log_softmax(x, dim=1), [(3, 4)]),
    ("linear", lambda m, x, w, b: m.linear(x, w, b), [(2, 3), (4, 3), (4,)]),
    ("sdpa", lambda m, q, k, v: m.scaled_dot_product_attention(q, k, v), [(2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3)]),
    ("sdpa_causal", lambda m, q, k, v: m.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
     [(2, 5, 4), (2, 5, 4), (2, 5, 4)]),
    ("sdpa_bool_mask", lambda m, q, k, v, mask: m.scaled_dot_product_attention(q, k, v, attn_mask=mask),
     [(2, 3, 4), (2, 5, 4), (2, 5, 4), lambda rng: np.arange(5)[None, :] <= np.arange(3)[:, None] + 1]),
    ("sdpa_float_mask", lambda m, q, k, v, mask: m.scaled_dot_product_attention(q, k, v, attn_mask=mask),
     [(2, 3, 4), (2, 5, 4), (2, 5, 4), (3, 5)]),
    # losses
    ("l1_loss", lambda m, x, t: m.l1_loss(x, t), [(3, 4), (3, 4)]),
    ("mse_loss_sum", lambda m, x, t: m.mse_loss(x, t, reduction="sum"), [(3, 4), (3, 4)]),
    ("smooth_l1", lambda m, x, t: m.smooth_l1_loss(x, t, beta=0.5), [(3, 4), (3, 4)]),
    ("smooth_l1_beta0", lambda m, x, t: m.smooth_l1_loss(x, t, reduction="none", beta=0.0), [(3, 4), (3, 4)]),
    ("huber", lambda m, x, t: m.huber_loss(x, t, delta=0.7), [(3, 4), (3, 4)]),
    ("bce", lambda m, x, t, w: m.binary_cross_entropy(x, t.detach(), w.detach()), [unit((3, 4)), unit((3, 4)), unit((4,))]),
    ("bce_logits", lambda m, x, t, pw: m.binary_cross_entropy_with_logits(x, t, pos_weight=pw.detach()),
     [scaled((3, 4), 3.0), unit((3, 4)), unit((4,))]),
    ("bce_logits_weight", lambda m, x, t, w: m.binary_cross_entropy_with_logits(x, t, w.detach(), reduction="none"),
     [(3, 4), unit((3, 4)), unit((3, 4))]),
    ("nll", lambda m, x, t: m.nll_loss(m.log_softmax(x, 1), t), [(4, 5), ints((4,), 0, 5)]),
    ("nll_weight_ignore", lambda m, x, t, w: m.nll_loss(x, t, w.detach().abs(), ignore_index=2),
     [(6, 5), ints((6,), 0, 5), (5,)]),
    ("cross_entropy", lambda m, x, t: m.cross_entropy(x, t), [(4, 5), ints((4,), 0, 5)]),
    ("cross_entropy_spatial", lambda m, x, t: m.cross_entropy(x, t, reduction="sum"), [(2, 3, 4, 2), ints((2, 4, 2), 0, 3)]),
    ("cross_entropy_smooth", lambda m, x, t, w: m.cross_entropy(x, t, w.detach().abs(), ignore_index=1,
                                                               label_smoothing=0.2),
     [(8, 4), ints((8,), 0, 4), (4,)]),
    ("cross_entropy_smooth_none", lambda m, x, t: m.cross_entropy(x, t, ignore_index=0, reduction="none",
                                                                 label_smoothing=0.1), [(6, 3), ints((6,), 0, 3)]),
    ("cross_entropy_probs", lambda m, x, t: m.cross_entropy(x, t, label_smoothing=0.3), [(4, 5), probs((4, 5))]),
    ("cross_entropy_probs_weight", lambda m, x, t, w: m.cross_entropy(x, t, w.detach().abs()),
     [(2, 3, 4), probs((2, 3, 4)), (3,)]),
    ("cross_entropy_unbatched", lambda m, x, t: m.cross_entropy(x, t), [(5,), ints((), 0, 5)]),
    ("kl_div", lambda m, x, t: m.kl_div(m.log_softmax(x, 1), t, reduction="batchmean"), [(3, 4), probs((3, 4))]),
]


@pytest.mark.parametrize("name,fn,specs", FUNCTIONAL_CASES, ids=[c[0] for c in FUNCTIONAL_CASES])
def test_functional_matches_torch(name, fn, specs):
    run_both(lambda *x: fn(F, *x), lambda *x: fn(TF, *x), specs)


def test_batch_norm_functional_updates_running_stats():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    f_rm, f_rv = flow.zeros(3), flow.ones(3)
    t_rm, t_rv = torch.zeros(3), torch.ones(3)
    F.batch_norm(flow.tensor(x), f_rm, f_rv, training=True, momentum=0.25)
    TF.batch_norm(torch.tensor(x), t_rm, t_rv, training=True, momentum=0.25)
    assert_close(f_rm, t_rm, "running_mean")
    assert_close(f_rv, t_rv, "running_var (unbiased)")


# -- dropout, init, utilities, containers, errors --------------------------------------------


def test_dropout_drops_and_rescales():
    flow.manual_seed(0)
    x = flow.ones(200, 100)
    y = F.dropout(x, 0.3).numpy()
    assert abs((y == 0).mean() - 0.3) < 0.02
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.7], rtol=1e-6)
    assert F.dropout(x, 1.0).numpy().max() == 0.0


def test_dropout_inside_graph_draws_fresh_masks():
    drop = flow.nn.Dropout(0.25)

    class G(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.drop = drop

        def build(self, x):
            return self.drop(x)

    g = G()
    a, b = g(flow.ones(100, 100)).numpy(), g(flow.ones(100, 100)).numpy()
    assert abs((a == 0).mean() - 0.25) < 0.03 and not np.array_equal(a, b)
    drop.eval()
    np.testing.assert_array_equal(drop(flow.ones(3, 3)).numpy(), np.ones((3, 3)))


@pytest.mark.parametrize("name,args", [("Conv2d", (8, 16, 3)), ("Conv1d", (16, 32, 5)), ("ConvTranspose2d", (8, 4, 3)),
                                       ("Linear", (64, 32))])
def test_init_bounds_match_torch(name, args):
    """reset_parameters as PyTorch's: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias."""
    flow.manual_seed(0)
    f_mod, t_mod = getattr(flow.nn, name)(*args), getattr(torch.nn, name)(*args)
    fan_in = t_mod.weight.shape[1] * math.prod(t_mod.weight.shape[2:])
    for key, t_value in t_mod.state_dict().items():
        got = np.abs(f_mod.state_dict()[key].numpy())
        assert got.shape == tuple(t_value.shape)
        assert 0.8 / math.sqrt(fan_in) < got.max() <= 1 / math.sqrt(fan_in) + 1e-7, f"{name}.{key}"


def test_weights_copy_from_flow_to_torch():
    f_mod, t_mod = flow.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(3, 4, 3, padding=1)
    t_mod.load_state_dict({k: torch.tensor(v.numpy()) for k, v in f_mod.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((1, 3, 5, 5)).astype(np.float32)
    assert_close(f_mod(flow.tensor(x)), t_mod(torch.tensor(x)), "Conv2d with flowserve's weights")


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_matches_torch(norm_type):
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(s).astype(np.float32) * 3 for s in [(3, 4), (5,)]]
    f_ps = [flow.nn.Parameter(flow.zeros(*g.shape)) for g in grads]
    t_ps = [torch.nn.Parameter(torch.zeros(*g.shape)) for g in grads]
    for fp, tp, g in zip(f_ps, t_ps, grads):
        fp.grad, tp.grad = flow.tensor(g), torch.tensor(g)
    f_norm = flow.nn.utils.clip_grad_norm_(f_ps, 2.0, norm_type)
    t_norm = torch.nn.utils.clip_grad_norm_(t_ps, 2.0, norm_type)
    assert_close(f_norm, t_norm, "total norm")
    for fp, tp in zip(f_ps, t_ps):
        assert_close(fp.grad, tp.grad, "clipped gradient")
    flow.nn.utils.clip_grad_value_(f_ps, 0.1)
    torch.nn.utils.clip_grad_value_(t_ps, 0.1)
    assert_close(f_ps[0].grad, t_ps[0].grad, "value-clipped gradient")


def test_parameter_containers_have_torch_keys():
    f_list = flow.nn.ParameterList([flow.nn.Parameter(flow.ones(2)), flow.zeros(3)])
    t_list = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2)), torch.zeros(3)])
    assert list(f_list.state_dict()) == list(t_list.state_dict()) and len(f_list) == 2
    f_dict = flow.nn.ParameterDict({"a": flow.ones(2), "b": flow.nn.Parameter(flow.zeros(1))})
    t_dict = torch.nn.ParameterDict({"a": torch.ones(2), "b": torch.nn.Parameter(torch.zeros(1))})
    assert list(f_dict.state_dict()) == list(t_dict.state_dict()) and "a" in f_dict
    assert all(p.requires_grad for p in f_list.parameters())


@pytest.mark.parametrize("make,shape,message", [
    (lambda: flow.nn.Conv2d(3, 8, 3), (3, 32, 32), "Conv2d expected input (N, 3, H, W), got (3, 32, 32)"),
    (lambda: flow.nn.Conv2d(3, 8, 3), (2, 4, 8, 8), "Conv2d expected input (N, 3, H, W), got (2, 4, 8, 8)"),
    (lambda: flow.nn.Conv1d(2, 8, 3), (2, 2, 8, 8), "Conv1d expected input (N, 2, L), got (2, 2, 8, 8)"),
    (lambda: flow.nn.BatchNorm2d(4), (2, 4, 8), "BatchNorm2d expected input (N, 4, H, W), got (2, 4, 8)"),
    (lambda: flow.nn.MaxPool2d(2), (4, 8, 8), "MaxPool2d expected input (N, C, H, W), got (4, 8, 8)"),
    (lambda: flow.nn.LayerNorm(5), (2, 4), "layer_norm expected input (*, 5), got (2, 4)"),
    (lambda: flow.nn.Conv2d(3, 8, 5), (1, 3, 2, 2), "conv expected an input at least as large as the (dilated) kernel"),
])
def test_shape_errors_name_op_expected_and_given(make, shape, message):
    with pytest.raises(ShapeError) as info:
        make()(flow.randn(*shape))
    assert message in str(info.value)


def test_dtype_error_names_the_op():
    with pytest.raises(DTypeError, match="conv2d expected a floating point input"):
        F.conv2d(flow.ones(1, 1, 3, 3, dtype=flow.int64), flow.ones(1, 1, 2, 2, dtype=flow.int64))


def test_convolutions_in_threads_sharing_a_context_match_torch():
    """Threads that run in copies of one context (as ``asyncio.to_thread`` does) each get
    their own im2col scratch: concurrent convolutions of different sizes stay exact."""
    rng = np.random.default_rng(0)
    cases = [(rng.standard_normal((4, c, s, s)).astype(np.float32),
              rng.standard_normal((8, c // g, 3, 3)).astype(np.float32), g)
             for c, s, g in [(8, 12, 1), (16, 9, 2), (8, 15, 1), (16, 11, 4)]]
    expected = [TF.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1, groups=g).numpy()
                for x, w, g in cases]
    F.conv2d(flow.tensor(cases[0][0]), flow.tensor(cases[0][1]), padding=1)  # this thread's scratch

    def run(i):
        x, w, g = cases[i]
        outs = [F.conv2d(flow.tensor(x), flow.tensor(w), padding=1, groups=g).numpy() for _ in range(40)]
        return [float(np.abs(o - expected[i]).max()) for o in outs]

    contexts = [contextvars.copy_context() for _ in cases]
    with ThreadPoolExecutor(len(cases)) as pool:
        errors = list(pool.map(lambda i: contexts[i].run(run, i), range(len(cases))))
    for i, errs in enumerate(errors):
        assert max(errs) <= 1e-4 * float(np.abs(expected[i]).max()), (i, errs)


@pytest.mark.parametrize("stride,dilation,pads", [(1, 1, (1, 1)), ((2, 1), (1, 2), (0, 2)), (3, 1, (2, 0))],
                         ids=["same", "strided-dilated", "stride3"])
def test_convolution_of_a_batch_inner_input_matches_torch(monkeypatch, stride, dilation, pads):
    """An input whose batch is its most contiguous axis (a weight gradient's: the layer's
    input transposed) runs the kernel's batch-inner im2col; the output and both gradients
    are torch's."""
    calls = []
    batch_inner = conv_kernels._batch_inner
    monkeypatch.setattr(conv_kernels, "_batch_inner", lambda *a: calls.append(1) or batch_inner(*a))
    rng = np.random.default_rng(3)
    stored = rng.standard_normal((5, 6, 11, 9)).astype(np.float32)  # (C, B, H, W) in memory
    w = rng.standard_normal((4, 5, 3, 2)).astype(np.float32)
    g = rng.standard_normal(TF.conv2d(torch.zeros(6, 5, 11, 9), torch.zeros(4, 5, 3, 2), stride=stride,
                                      padding=pads, dilation=dilation).shape).astype(np.float32)
    fx = flow.tensor(stored).permute(1, 0, 2, 3)
    fx.requires_grad_(True)
    fw = flow.tensor(w, requires_grad=True)
    out = F.conv2d(fx, fw, stride=stride, padding=pads, dilation=dilation)
    (out * flow.tensor(g)).sum().backward()
    tx = torch.tensor(stored).permute(1, 0, 2, 3).requires_grad_(True)
    tw = torch.tensor(w, requires_grad=True)
    ref = TF.conv2d(tx, tw, stride=stride, padding=pads, dilation=dilation)
    (ref * torch.tensor(g)).sum().backward()
    assert calls, "the batch-inner path did not run"
    for mine, theirs, what in [(out, ref, "output"), (fx.grad, tx.grad, "input grad"), (fw.grad, tw.grad, "weight grad")]:
        theirs = theirs.detach().numpy()
        assert mine.shape == theirs.shape, what
        assert np.abs(mine.numpy() - theirs).max() <= 1e-5 * np.abs(theirs).max(), what
