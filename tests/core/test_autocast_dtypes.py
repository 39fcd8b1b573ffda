"""``flow.autocast`` gives PyTorch's CPU autocast dtypes and numbers: lower-precision ops
return float16/bfloat16 tensors, the float32 list returns float32, everything else promotes;
gradients reach float32 parameters; a graph that autocasts in build() gives eager's dtypes and
numbers, trains like eager, saves and exports."""

from __future__ import annotations

import copy

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as TF

import flowserve as flow
import flowserve.nn as nn
import flowserve.nn.functional as F
from flowserve.exporter import export
from tests.precision import EPS, assert_close_in_format

RNG = np.random.default_rng(0)
X, W, B = (RNG.standard_normal(s).astype(np.float32) for s in ((4, 8), (6, 8), (6,)))
IMG, K = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32), RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
Y = RNG.integers(0, 6, 4)
ULP = EPS  # one unit in the last place of each format (tests/precision.py)


def _ops(lib, fn, make):
    x, w, b, img, k, y = (make(a) for a in (X, W, B, IMG, K, Y))
    zeros, ones = make(np.zeros((4, 6), np.float32)), make(np.ones(6, np.float32))
    lin = fn.linear(x, w, b)
    c = fn.conv2d(img, k, make(B[:4]))
    return {
        "linear": lin, "matmul": x @ w.T, "bmm": lib.bmm(x[None], w.T[None]), "conv2d": c,
        "conv_transpose2d": fn.conv_transpose2d(img, k.transpose(0, 1)),
        "relu": fn.relu(lin), "gelu": fn.gelu(lin), "softmax": fn.softmax(lin, -1), "exp": lin.exp(),
        "log_softmax": fn.log_softmax(lin, -1), "layer_norm": fn.layer_norm(lin, (6,), ones, zeros[0]),
        "batch_norm": fn.batch_norm(c, make(np.zeros(4, np.float32)), make(np.ones(4, np.float32))),
        "group_norm": fn.group_norm(c, 2), "max_pool2d": fn.max_pool2d(c, 2), "avg_pool2d(low)": fn.avg_pool2d(c, 2),
        "avg_pool2d(f32)": fn.avg_pool2d(img, 2), "sdpa": fn.scaled_dot_product_attention(x[None], x[None], x[None]),
        "cross_entropy": fn.cross_entropy(lin, y), "nll_loss": fn.nll_loss(fn.log_softmax(lin, -1), y),
        "mse_loss": fn.mse_loss(lin, zeros), "bce_with_logits": fn.binary_cross_entropy_with_logits(lin, zeros),
        "low + f32": lin + x[:, :6], "low + scalar": lin * 2.0 + 1.0, "cat": lib.cat([lin, x[:, :6]]),
        "where": lib.where(lin > 0, lin, x[:, :6]), "sum": lin.sum(), "mean": lin.mean(),
        "embedding": fn.embedding(y, w), "matmul(float64)": make(X.astype(np.float64)) @ make(W.T.astype(np.float64)),
    }


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_dtypes_and_values_match_torch(dtype):
    with flow.autocast("cpu", dtype=getattr(flow, dtype)):
        got = _ops(flow, F, flow.tensor)
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        ref = _ops(torch, TF, torch.tensor)
    # products accumulate over this many terms: PyTorch's kernel may sum them in another order or
    # width (oneDNN differs between Intel and AMD CPUs), so allow the rounding the format allows
    terms = {"linear": 8, "matmul": 8, "bmm": 8, "conv2d": 27, "conv_transpose2d": 27}
    for name, r in ref.items():
        g = got[name]
        assert g.dtype.name == str(r.dtype).split(".")[-1], (name, g.dtype, r.dtype)
        gv, rv = g.float().numpy(), r.float().detach().numpy()
        if name in ("embedding", "matmul(float64)"):  # a lookup, and a float64 product: no low-precision rounding
            np.testing.assert_allclose(gv, rv, rtol=0, atol=1e-12, err_msg=name)
            continue
        # composites may round once more than PyTorch
        assert_close_in_format(gv, rv, dtype, roundings=2, terms=terms.get(name, 1), err_msg=name)
    assert F.linear(flow.tensor(X), flow.tensor(W)).dtype == flow.float32  # leaving the context restores float32
    with flow.autocast("cpu"), flow.autocast("cpu", enabled=False):
        assert (flow.tensor(X) @ flow.tensor(W).T).dtype == flow.float32


def _layers(lib):
    n = lib.nn
    return [n.LSTM(4, 8, num_layers=2), n.GRU(4, 8), n.PReLU(3), n.MultiheadAttention(8, 2),
            n.TransformerEncoderLayer(8, 2, 16, dropout=0.0)]


def _torch_autocast_call(module, *args):
    """``module(*args)`` under torch.autocast; where oneDNN has no bfloat16 kernel for this CPU
    (its LSTM on AMD EPYC: "could not create a primitive descriptor"), what that kernel computes:
    bfloat16 inputs and weights, float32 arithmetic, a bfloat16 result."""
    try:
        return module(*args)
    except RuntimeError as e:
        if "primitive descriptor" not in str(e):
            raise
    rounded = copy.deepcopy(module)
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        for p in rounded.parameters():
            p.copy_(p.bfloat16().float())
        out = rounded(*[a.bfloat16().float() for a in args])
    return tuple(o.bfloat16() if isinstance(o, torch.Tensor) else o for o in out)


def test_autocast_layers_match_torch():
    flow.manual_seed(5)
    mine, theirs = _layers(flow), _layers(torch)
    for a, b in zip(mine, theirs):
        b.load_state_dict({k: torch.tensor(v.numpy()) for k, v in a.state_dict().items()})
    seq = RNG.standard_normal((5, 2, 4)).astype(np.float32)
    tokens, small = RNG.standard_normal((5, 2, 8)).astype(np.float32), RNG.standard_normal((2, 3)).astype(np.float32)
    args = [(seq,), (seq,), (small,), (tokens, tokens, tokens), (tokens,)]
    a, b = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((3, 4)).astype(np.float32)
    with flow.autocast("cpu"):
        got = [m(*[flow.tensor(v) for v in x]) for m, x in zip(mine, args)]
        got.append(flow.einsum("ij,jk->ik", flow.tensor(a), flow.tensor(b)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = [_torch_autocast_call(m, *[torch.tensor(v) for v in x]) for m, x in zip(theirs, args)]
        ref.append(torch.einsum("ij,jk->ik", torch.tensor(a), torch.tensor(b)))
    for i, (g, r) in enumerate(zip(got, ref)):
        g, r = (g[0], r[0]) if isinstance(r, tuple) else (g, r)  # LSTM's and GRU's output, MHA's
        assert g.dtype.name == str(r.dtype).split(".")[-1], (i, g.dtype, r.dtype)  # LSTM bf16, GRU float32...
        rv = r.float().detach().numpy()
        np.testing.assert_allclose(g.float().numpy(), rv, rtol=0, err_msg=str(i),
                                   atol=2 * ULP["bfloat16"] * max(1.0, float(np.abs(rv).max())))


def _nets(lib):
    n = lib.nn
    return n.Sequential(n.Conv2d(3, 4, 3), n.BatchNorm2d(4), n.ReLU(), n.Flatten(), n.Linear(4 * 6 * 6, 16),
                        n.LayerNorm(16), n.GELU(), n.Linear(16, 5))


def _twins():
    flow.manual_seed(0)
    mine, theirs = _nets(flow), _nets(torch)
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in mine.state_dict().items()})
    return mine, theirs


def test_autocast_gradients_reach_float32_parameters_like_torch():
    mine, theirs = _twins()
    x, y = RNG.standard_normal((4, 3, 8, 8)).astype(np.float32), RNG.integers(0, 5, 4)
    with flow.autocast("cpu"):
        logits = mine(flow.tensor(x))
        loss = F.cross_entropy(logits, flow.tensor(y))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_logits = theirs(torch.tensor(x))
        ref = TF.cross_entropy(ref_logits, torch.tensor(y))
    assert logits.dtype == flow.bfloat16 and loss.dtype == flow.float32
    loss.backward()
    ref.backward()
    np.testing.assert_allclose(float(loss), float(ref), rtol=2 * ULP["bfloat16"])
    scale = max(float(q.grad.abs().max()) for q in theirs.parameters())
    for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
        assert p.grad.dtype == flow.float32, name
        # bfloat16 activations: gradients agree to a few bfloat16 steps of the gradients' scale (the
        # conv bias before BatchNorm has a true gradient of 0: its values are rounding noise)
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=0, atol=4 * ULP["bfloat16"] * scale,
                                   err_msg=name)


class _Infer(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        with flow.autocast("cpu"):
            return self.model(x)


class _Train(nn.Graph):
    def __init__(self, model, opt):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)

    def build(self, x, y):
        with flow.autocast("cpu"):
            loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        return loss


def _bf16_close(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    # one bfloat16 step: ONNX Runtime and numpy sum a product in another order, and a float32
    # result on a rounding boundary can round to the neighbouring bfloat16 value
    np.testing.assert_allclose(got, ref, rtol=0, atol=ULP["bfloat16"] * max(1.0, float(np.abs(ref).max())))


def test_graph_autocast_gives_eager_dtypes_numbers_and_training(tmp_path):
    mine, _ = _twins()
    eager, _ = _twins()
    x = RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)
    mine.eval(), eager.eval()
    graph = _Infer(mine)
    out = graph(flow.tensor(x))
    with flow.autocast("cpu"):
        ref = eager(flow.tensor(x))
    assert out.dtype == ref.dtype == flow.bfloat16
    _bf16_close(out.float().numpy(), ref.float().numpy())
    flow.save(graph, tmp_path / "g")
    export(tmp_path / "g", tmp_path / "g.onnx")
    session = ort.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        xb = RNG.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        with flow.autocast("cpu"):
            ref = eager(flow.tensor(xb)).float().numpy()
        _bf16_close(session.run(None, {"x": xb})[0], ref)  # bfloat16 values, given as float32
        _bf16_close(flow.load(tmp_path / "g")(xb).float().numpy(), ref)

    mine.train(), eager.train()
    graph = _Train(mine, flow.optim.SGD(mine.parameters(), lr=0.1))
    opt = flow.optim.SGD(eager.parameters(), lr=0.1)
    for step in range(3):
        xs, ys = flow.tensor(RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)), flow.tensor(RNG.integers(0, 5, 4))
        loss = graph(xs, ys)
        opt.zero_grad()
        with flow.autocast("cpu"):
            ref = F.cross_entropy(eager(xs), ys)
        ref.backward()
        opt.step()
        assert loss.dtype == flow.float32
        np.testing.assert_allclose(float(loss), float(ref), rtol=4 * ULP["bfloat16"])
    for p, q in zip(mine.parameters(), eager.parameters()):
        assert p.dtype == flow.float32
        _bf16_close(p.numpy(), q.numpy())
