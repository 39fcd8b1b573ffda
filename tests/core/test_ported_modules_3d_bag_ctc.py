"""ConvTranspose3d, adaptive 3-d pooling, EmbeddingBag and CTCLoss against PyTorch 2.13:
values and gradients eagerly, then each in a model trained three steps in nn.Graph (equal to
PyTorch), saved, exported to ONNX and loaded back (equal to PyTorch at batch sizes 1 and 5
where the batch is dynamic)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as TF

import flowserve as flow
import flowserve.nn as nn
import flowserve.nn.functional as F
from flowserve.exporter import export

RNG = np.random.default_rng(0)


def _close(a, b, rtol=1e-5):
    a = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    finite = np.abs(b[np.isfinite(b)])
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(finite.max()) if finite.size else 1.0))


def _grad_pair(values):
    return flow.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)


def _backward_both(got, ref):
    g = RNG.standard_normal(tuple(ref.shape)).astype(np.float32)
    (got * flow.tensor(g)).sum().backward()
    (ref * torch.tensor(g)).sum().backward()


# -- eager: values and gradients ------------------------------------------------------------------

CONV_T = [dict(), dict(stride=2, padding=1, output_padding=1),
          dict(stride=(2, 1, 3), padding=(1, 0, 2), output_padding=(0, 0, 2), groups=2, dilation=(1, 2, 1)),
          dict(stride=3, dilation=2, output_padding=2), dict(padding=2, dilation=3)]


@pytest.mark.parametrize("kw", CONV_T, ids=["plain", "strided", "mixed-grouped", "output-padding", "dilated"])
def test_conv_transpose3d_matches_torch(kw):
    groups = kw.get("groups", 1)
    (xs, xt), (ws, wt), (bs, bt) = (_grad_pair(RNG.standard_normal(s).astype(np.float32))
                                    for s in ((2, 4, 3, 4, 5), (4, 3, 3, 2, 3), (3 * groups,)))
    got, ref = F.conv_transpose3d(xs, ws, bs, **kw), TF.conv_transpose3d(xt, wt, bt, **kw)
    _close(got, ref, 1e-4)
    _backward_both(got, ref)
    for a, b in ((xs, xt), (ws, wt), (bs, bt)):
        _close(a.grad, b.grad, 1e-4)


@pytest.mark.parametrize("size", [(2, 3, 2), 1, (3, None, 4), (4, 5, 6), (7, 6, 5)])
def test_adaptive_3d_pooling_matches_torch(size):
    x = RNG.standard_normal((2, 3, 7, 6, 5)).astype(np.float32)
    (xs, xt) = _grad_pair(x)
    got, ref = F.adaptive_avg_pool3d(xs, size), TF.adaptive_avg_pool3d(xt, size)
    _close(got, ref)
    _backward_both(got, ref)
    _close(xs.grad, xt.grad)
    (xs, xt) = _grad_pair(x)
    (got, at), (ref, ref_at) = (F.adaptive_max_pool3d(xs, size, return_indices=True),
                                TF.adaptive_max_pool3d(xt, size, return_indices=True))
    _close(got, ref)
    assert at.dtype == flow.int64 and np.array_equal(at.numpy(), ref_at.numpy())
    _backward_both(got, ref)
    _close(xs.grad, xt.grad)
    _close(nn.AdaptiveMaxPool3d(size)(flow.tensor(x[0])), torch.nn.AdaptiveMaxPool3d(size)(torch.tensor(x[0])))
    _close(nn.AdaptiveAvgPool3d(size)(flow.tensor(x[0])), torch.nn.AdaptiveAvgPool3d(size)(torch.tensor(x[0])))


@pytest.mark.parametrize("size", [(3, 2), 1, (None, 3)])
def test_adaptive_max_pool_1d_2d_return_indices_like_torch(size):
    x = RNG.standard_normal((2, 3, 7, 5)).astype(np.float32)
    (got, at), (ref, ref_at) = (nn.AdaptiveMaxPool2d(size, return_indices=True)(flow.tensor(x)),
                                torch.nn.AdaptiveMaxPool2d(size, return_indices=True)(torch.tensor(x)))
    _close(got, ref)
    assert np.array_equal(at.numpy(), ref_at.numpy())
    (got, at), (ref, ref_at) = (F.adaptive_max_pool1d(flow.tensor(x[0]), 3, True),
                                TF.adaptive_max_pool1d(torch.tensor(x[0]), 3, True))
    _close(got, ref)
    assert np.array_equal(at.numpy(), ref_at.numpy())


BAG_INPUT = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 0], dtype=np.int64)
BAG_OFFSETS = np.array([0, 4, 4, 7], dtype=np.int64)  # the second bag is empty
BAGS = [(layout, mode, padding_idx) for layout in ("offsets", "last-offset", "2d") for mode in ("sum", "mean", "max")
        for padding_idx in (None, 4, 0)]


@pytest.mark.parametrize("layout,mode,padding_idx", BAGS)
def test_embedding_bag_matches_torch(layout, mode, padding_idx):
    inputs = {"offsets": (BAG_INPUT, BAG_OFFSETS, False), "last-offset": (BAG_INPUT, np.append(BAG_OFFSETS, 10), True),
              "2d": (RNG.integers(0, 10, (3, 5)), None, False)}
    tokens, offsets, last = inputs[layout]
    weighted = mode == "sum"
    (ws, wt) = _grad_pair(RNG.standard_normal((10, 4)).astype(np.float32))
    (ps, pt) = _grad_pair(RNG.standard_normal(tokens.shape).astype(np.float32)) if weighted else (None, None)
    kw = dict(mode=mode, padding_idx=padding_idx, include_last_offset=last)
    got = F.embedding_bag(flow.tensor(tokens), ws, None if offsets is None else flow.tensor(offsets),
                          per_sample_weights=ps, **kw)
    ref = TF.embedding_bag(torch.tensor(tokens), wt, None if offsets is None else torch.tensor(offsets),
                           per_sample_weights=pt, **kw)
    _close(got, ref)
    _backward_both(got, ref)
    _close(ws.grad, wt.grad)
    if weighted:
        _close(ps.grad, pt.grad)


def test_embedding_bag_module_and_errors():
    flow.manual_seed(0)
    bag = nn.EmbeddingBag(10, 3, mode="max", padding_idx=2)
    assert list(bag.state_dict()) == ["weight"] and float(bag.weight[2].abs().sum()) == 0.0
    twin = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(bag.weight.numpy()), mode="max", padding_idx=2)
    _close(bag(flow.tensor(BAG_INPUT), flow.tensor(BAG_OFFSETS)), twin(torch.tensor(BAG_INPUT), torch.tensor(BAG_OFFSETS)))
    with pytest.raises(ValueError, match="per_sample_weights is only supported for mode='sum'"):
        nn.EmbeddingBag(10, 3)(flow.tensor(BAG_INPUT), flow.tensor(BAG_OFFSETS), flow.ones(10))
    with pytest.raises(ValueError, match="offsets has to be None if input is 2-D"):
        F.embedding_bag(flow.tensor([[1, 2]]), bag.weight, flow.tensor([0]))
    with pytest.raises(Exception, match="1-D offsets with a 1-D input"):
        F.embedding_bag(flow.tensor([1, 2]), bag.weight)


def _ctc_case(layout, blank, seed=0):
    rng = np.random.default_rng(seed)
    steps, n, classes = 12, 4, 6
    lengths, target_lengths = np.array([12, 10, 7, 12]), np.array([4, 0, 3, 5])
    targets = rng.integers(0, classes - 1, (n, 5))
    targets[targets >= blank] += 1  # never the blank
    targets[3, 1] = targets[3, 2]  # a repeated label needs a blank between
    if layout == "concatenated":
        targets = np.concatenate([targets[i, :target_lengths[i]] for i in range(n)])
    logits = rng.standard_normal((steps, n, classes)).astype(np.float32)
    return logits, targets, lengths, target_lengths


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
@pytest.mark.parametrize("blank", [0, 3])
@pytest.mark.parametrize("wrt", ["log_probs", "logits"])
def test_ctc_loss_and_its_gradient_match_torch(reduction, layout, blank, wrt):
    logits, targets, lengths, target_lengths = _ctc_case(layout, blank)
    source = logits if wrt == "logits" else TF.log_softmax(torch.tensor(logits), -1).numpy()
    xs, xt = _grad_pair(source)
    lp_s = F.log_softmax(xs, -1) if wrt == "logits" else xs
    lp_t = TF.log_softmax(xt, -1) if wrt == "logits" else xt
    got = F.ctc_loss(lp_s, flow.tensor(targets), flow.tensor(lengths), flow.tensor(target_lengths), blank=blank,
                     reduction=reduction)
    ref = TF.ctc_loss(lp_t, torch.tensor(targets), torch.tensor(lengths), torch.tensor(target_lengths), blank=blank,
                      reduction=reduction)
    _close(got, ref)
    _backward_both(got, ref)
    _close(xs.grad, xt.grad)  # w.r.t. log_probs too: PyTorch's exp(log_probs) - posterior


def test_ctc_impossible_alignments_unbatched_and_module():
    lp = TF.log_softmax(torch.tensor(RNG.standard_normal((3, 2, 5)).astype(np.float32)), -1).numpy()
    targets = np.array([[1, 1, 2], [1, 2, 3]])  # "1 1 2" needs 4 frames: impossible in 3
    for zero_infinity in (False, True):
        xs, xt = _grad_pair(lp)
        loss = nn.CTCLoss(reduction="none", zero_infinity=zero_infinity)
        got = loss(xs, flow.tensor(targets), [3, 3], (3, 2))
        ref = TF.ctc_loss(xt, torch.tensor(targets), [3, 3], [3, 2], reduction="none", zero_infinity=zero_infinity)
        _close(got, ref)
        if zero_infinity:
            got.sum().backward()
            ref.sum().backward()
            _close(xs.grad, xt.grad)
    assert np.isinf(got.numpy()[0]) if not zero_infinity else got.numpy()[0] == 0.0
    _close(F.ctc_loss(flow.tensor(lp[:, 0]), flow.tensor([1, 2]), 3, 2),
           TF.ctc_loss(torch.tensor(lp[:, 0]), torch.tensor([1, 2]), torch.tensor(3), torch.tensor(2)))
    with pytest.raises(ValueError, match=r"input_lengths within \[0, 3\]"):
        F.ctc_loss(flow.tensor(lp), flow.tensor(targets), [4, 3], [1, 1])
    with pytest.raises(ValueError, match="blank within the 5 classes"):
        F.ctc_loss(flow.tensor(lp), flow.tensor(targets), [3, 3], [1, 1], blank=5)


# -- in models: nn.Graph training, save, export, load ------------------------------------------


class _Train(nn.Graph):
    def __init__(self, model, optimizer, loss_fn):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn
        self.add_optimizer(optimizer)

    def build(self, *args):
        loss = self.loss_fn(self.model, *args)
        loss.backward()
        return loss


class _Infer(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, *args):
        return self.model(*args)


def _train_like_torch(mine, theirs, loss_fn, torch_loss_fn, batches):
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in mine.state_dict().items()})
    graph = _Train(mine, flow.optim.SGD(mine.parameters(), lr=0.1, momentum=0.9), loss_fn)
    opt = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9)
    for args in batches:
        loss = graph(*[flow.tensor(a) for a in args])
        opt.zero_grad()
        ref = torch_loss_fn(theirs, *[torch.tensor(a) for a in args])
        ref.backward()
        opt.step()
        _close(loss, ref, 1e-4)
    for p, q in zip(mine.state_dict().values(), theirs.state_dict().values()):
        _close(p, q, 1e-4)


def _deploys_like_torch(tmp_path, mine, theirs, samples, batches=(1, 5)):
    """Inference graph traced on ``samples(2)``; saved, exported and loaded; each equals the
    PyTorch twin at every batch size in ``batches``."""
    mine.eval(), theirs.eval()
    graph = _Infer(mine)
    graph(*[flow.tensor(a) for a in samples(2)])
    flow.save(graph, tmp_path / "g")
    export(tmp_path / "g", tmp_path / "g.onnx")
    session = ort.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    loaded = flow.load(tmp_path / "g")
    names = [i.name for i in session.get_inputs()]
    for batch in batches:
        args = samples(batch)
        with torch.no_grad():
            ref = theirs(*[torch.tensor(a) for a in args])
        _close(graph(*[flow.tensor(a) for a in args]), ref, 1e-4)
        _close(session.run(None, dict(zip(names, args)))[0], ref, 1e-4)
        _close(loaded(*args), ref, 1e-4)


def _volume_nets(lib):
    n = lib.nn
    return n.Sequential(n.ConvTranspose3d(3, 4, 3, stride=2, padding=1, output_padding=1, groups=1), n.ReLU(),
                        n.ConvTranspose3d(4, 4, (2, 3, 1), stride=(1, 2, 2), dilation=(2, 1, 1), groups=2),
                        n.AdaptiveMaxPool3d((3, 5, 2)), n.AdaptiveAvgPool3d((2, None, 3)), n.Flatten(),
                        n.Linear(4 * 2 * 5 * 3, 3))


def _volumes(batch, seed=0):
    return (np.random.default_rng(seed).standard_normal((batch, 3, 2, 3, 3)).astype(np.float32),)


def _classes(batch, seed=0):
    return np.random.default_rng(seed + 100).integers(0, 3, batch).astype(np.int64)


def test_3d_transposed_conv_and_adaptive_pools_train_and_deploy(tmp_path):
    flow.manual_seed(0)
    mine, theirs = _volume_nets(flow), _volume_nets(torch)
    _train_like_torch(mine, theirs, lambda m, x, y: F.cross_entropy(m(x), y),
                      lambda m, x, y: TF.cross_entropy(m(x), y),
                      [(*_volumes(4, s), _classes(4, s)) for s in range(3)])
    _deploys_like_torch(tmp_path, mine, theirs, _volumes)


class _BagNet:
    @staticmethod
    def make(lib, mode):
        class Net(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.bag = lib.nn.EmbeddingBag(12, 6, mode=mode, padding_idx=0)
                self.head = lib.nn.Linear(6, 3)

            def forward(self, tokens, weights=None):
                return self.head(self.bag(tokens, per_sample_weights=weights))

        return Net()


def _token_rows(batch, seed=0):
    tokens = np.random.default_rng(seed).integers(0, 12, (batch, 5)).astype(np.int64)
    tokens[0, :] = 0  # an all-padding bag
    return (tokens,)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_trains_and_deploys_with_a_dynamic_batch(mode, tmp_path):
    flow.manual_seed(1)
    mine, theirs = _BagNet.make(flow, mode), _BagNet.make(torch, mode)
    _train_like_torch(mine, theirs, lambda m, t, y: F.cross_entropy(m(t), y), lambda m, t, y: TF.cross_entropy(m(t), y),
                      [(*_token_rows(4, s), _classes(4, s)) for s in range(3)])
    _deploys_like_torch(tmp_path, mine, theirs, _token_rows)


def test_embedding_bag_with_offsets_and_weights_in_a_graph(tmp_path):
    flow.manual_seed(2)
    bag = nn.EmbeddingBag(10, 4, mode="sum", include_last_offset=True)
    twin = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(bag.weight.numpy()), mode="sum", include_last_offset=True)

    class Bags(nn.Graph):
        def __init__(self):
            super().__init__()
            self.bag = bag

        def build(self, tokens, offsets, weights):
            return self.bag(tokens, offsets, weights)

    weights = RNG.standard_normal(10).astype(np.float32)
    graph = Bags()
    for offsets in (np.array([0, 4, 4, 7, 10]), np.array([0, 1, 2, 9, 10])):  # offsets are data: no recompile
        args = (BAG_INPUT, offsets, weights)
        _close(graph(*[flow.tensor(a) for a in args]), twin(*[torch.tensor(a) for a in args]))
    flow.save(graph, tmp_path / "bags")
    export(tmp_path / "bags", tmp_path / "bags.onnx")
    session = ort.InferenceSession(str(tmp_path / "bags.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    args = (BAG_INPUT, np.array([0, 3, 3, 5, 10]), weights)
    ref = twin(*[torch.tensor(a) for a in args])
    _close(session.run(None, dict(zip(names, args)))[0], ref)
    _close(flow.load(tmp_path / "bags")(*args), ref)


class _Speech:
    @staticmethod
    def make(lib):
        class Net(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = lib.nn.Linear(5, 6)

            def forward(self, frames):  # (T, N, 5) -> log-probabilities (T, N, 6)
                return self.proj(frames).log_softmax(-1)

        return Net()


@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_ctc_loss_trains_in_a_graph_like_torch_and_exports(layout, tmp_path):
    flow.manual_seed(3)
    mine, theirs = _Speech.make(flow), _Speech.make(torch)
    steps = []
    for s in range(3):
        _, targets, lengths, target_lengths = _ctc_case(layout, 0, seed=s)
        frames = np.random.default_rng(s).standard_normal((12, 4, 5)).astype(np.float32)
        steps.append((frames, targets, lengths, target_lengths))
    _train_like_torch(mine, theirs, lambda m, x, t, il, tl: F.ctc_loss(m(x), t, il, tl, zero_infinity=True),
                      lambda m, x, t, il, tl: TF.ctc_loss(m(x), t, il, tl, zero_infinity=True), steps)

    class Loss(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model, self.ctc = mine, nn.CTCLoss(reduction="none")

        def build(self, frames, targets, lengths, target_lengths):
            return self.ctc(self.model(frames), targets, lengths, target_lengths)

    graph = Loss()
    frames, targets, lengths, target_lengths = steps[0]
    args = (frames, targets, lengths, target_lengths)
    with torch.no_grad():
        ref = TF.ctc_loss(theirs(torch.tensor(frames)), torch.tensor(targets), torch.tensor(lengths),
                          torch.tensor(target_lengths), reduction="none")
    _close(graph(*[flow.tensor(a) for a in args]), ref, 1e-4)
    other = (frames, targets, np.array([11, 12, 9, 8]), target_lengths)  # lengths are data: no recompile
    with torch.no_grad():
        ref_other = TF.ctc_loss(theirs(torch.tensor(frames)), torch.tensor(targets), torch.tensor(other[2]),
                                torch.tensor(target_lengths), reduction="none")
    _close(graph(*[flow.tensor(a) for a in other]), ref_other, 1e-4)
    flow.save(graph, tmp_path / "ctc")
    export(tmp_path / "ctc", tmp_path / "ctc.onnx")
    session = ort.InferenceSession(str(tmp_path / "ctc.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    _close(session.run(None, dict(zip(names, other)))[0], ref_other, 1e-4)
    _close(flow.load(tmp_path / "ctc")(*other), ref_other, 1e-4)
