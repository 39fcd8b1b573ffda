"""Ported architectures, end to end: eager forward equals the PyTorch twin; three training
steps in nn.Graph equal PyTorch's at drop rate 0; at drop rate > 0 the random ops draw anew
every call; the trained model saves, exports, loads and is served over HTTP, and agrees with
the twin at batch sizes 1 and 5 (rtol 1e-5, atol 1e-5 * max|ref|)."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import flowserve as flow
from flowserve.clients import HTTPClient
from flowserve.exporter import export
from tests.models.architectures import architectures
from tests.models.vision_architectures import vision_architectures
from tests.server.conftest import running_server


def _namespace(lib):
    return types.SimpleNamespace(**vars(architectures(lib)), **vars(vision_architectures(lib)))


FLOW, TORCH = _namespace(flow), _namespace(torch)


def _close(got, ref):
    got = got.numpy() if hasattr(got, "numpy") and not isinstance(got, np.ndarray) else np.asarray(got)
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def _image(batch, seed=0, size=16):
    return np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)


def _image32(batch, seed=0):
    return _image(batch, seed, 32)


def _image64(batch, seed=0):  # ResNet-50 and ShuffleNetV2 end at 2x2 positions, not 1x1 (below)
    return _image(batch, seed, 64)


def _tokens(batch, seed=0, vocab=17, length=8):
    return np.random.default_rng(seed).integers(0, vocab, (batch, length)).astype(np.int64)


CASES = {  # name: (kwargs of the deterministic model, kwargs with random ops, input maker, classes or vocab)
    "vit": ("ViT", {}, {"drop_path_rate": 0.5}, _image, 5),
    "convnext": ("ConvNeXt", {}, {"drop_path_rate": 0.5}, _image, 5),
    "efficientnet": ("EfficientNet", {}, {"sd_prob": 0.5}, _image, 5),
    "densenet": ("DenseNet", {}, None, _image, 5),
    "lstm_lm": ("RNNModel", {}, {"dropout": 0.5}, lambda b, seed=0: _tokens(b, seed), 17),
    "gpt": ("GPT", {}, {"dropout": 0.5}, lambda b, seed=0: _tokens(b, seed, vocab=19), 19),
    "resnet50": ("ResNet", {"zero_init_residual": True}, None, _image64, 5),
    "mobilenet_v3": ("MobileNetV3", {}, {"dropout": 0.5}, _image32, 5),
    "shufflenet_v2": ("ShuffleNetV2", {}, None, _image64, 5),
    "regnet_x": ("RegNet", {}, None, _image32, 5),
    "regnet_y": ("RegNet", {"se_ratio": 0.25}, None, _image32, 5),
    "swin": ("Swin", {}, None, _image, 5),
}

# Where float32 itself is chaotic no two implementations agree to 1e-5 after a training step.
# BatchNorm over 4 samples x 1 x 1 positions turns float32 rounding into gradients 20% off
# float64 (PyTorch's own float32 included, measured on ResNet-50 at 32x32), so the deep nets get
# 64x64 inputs. ResNet-50 with its default initialisation is still chaotic there: ~340k ReLU
# inputs at batch 4, some within a float32 rounding of 0, and 16 residual branches that amplify
# a flip; its gradients land up to 19% off float64 in PyTorch float32 (channels_last), flowserve
# eager or graph, by chance of seed and depth. torchvision's ``zero_init_residual`` (each
# branch starts at zero) keeps the first steps well conditioned.


def _twins(cls: str, kwargs: dict):
    flow.manual_seed(0)
    mine = getattr(FLOW, cls)(**kwargs)
    theirs = getattr(TORCH, cls)(**kwargs)
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in mine.state_dict().items()})
    return mine, theirs


def _targets(name, batch, classes, seed=1):
    rng = np.random.default_rng(seed)
    shape = (batch, 8) if name in ("lstm_lm", "gpt") else (batch,)
    return rng.integers(0, classes, shape).astype(np.int64)


def _loss(lib, logits, target, classes):
    return lib.nn.functional.cross_entropy(logits.reshape(-1, classes), target.reshape(-1))


class _TrainGraph(flow.nn.Graph):
    def __init__(self, model, optimizer, classes):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)
        self.classes = classes

    def build(self, x, y):
        loss = _loss(flow, self.model(x), y, self.classes)
        loss.backward()
        return loss


SLOW = {"resnet50"}  # about 25 s: 16 bottlenecks at 64x64


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in CASES])
def test_port_trains_saves_exports_and_matches_torch(name, tmp_path):
    cls, plain, _, make_input, classes = CASES[name]
    mine, theirs = _twins(cls, plain)
    eager = getattr(FLOW, cls)(**plain)
    eager.load_state_dict(mine.state_dict())
    mine.train(), theirs.train(), eager.train()
    opt = flow.optim.SGD(mine.parameters(), lr=0.05, momentum=0.9)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    eager_opt = flow.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    graph = _TrainGraph(mine, opt, classes)
    for step in range(3):
        x, y = make_input(4, seed=step), _targets(name, 4, classes, seed=step)
        loss = graph(flow.tensor(x), flow.tensor(y))
        eager_opt.zero_grad()
        eager_loss = _loss(flow, eager(flow.tensor(x)), flow.tensor(y), classes)
        eager_loss.backward()
        eager_opt.step()
        topt.zero_grad()
        ref = _loss(torch, theirs(torch.from_numpy(x)), torch.from_numpy(y), classes)
        ref.backward()
        topt.step()
        _close(float(loss), float(eager_loss))  # graph == eager
        _close(float(loss), float(ref))  # == PyTorch
    for (key, p), q in zip(mine.state_dict().items(), theirs.state_dict().values()):
        _close(p, q)
    flow.save(graph, tmp_path / name)
    export(tmp_path / name, tmp_path / f"{name}.onnx")
    session = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    loaded = flow.load(tmp_path / name)
    theirs.eval()
    for batch in (1, 5):
        x = make_input(batch, seed=10 + batch)
        with torch.no_grad():
            ref = theirs(torch.from_numpy(x))
        _close(session.run(None, {"x": x})[0], ref)
        _close(loaded(x), ref)
    _assert_served_like(tmp_path / name, theirs, make_input)


def _assert_served_like(saved, theirs, make_input):
    """The saved directory served over HTTP answers requests of 1 and 5 rows as the twin."""
    with running_server(saved) as server:
        client = HTTPClient(server.http_url)
        model = client.repository_index()[0]["name"]
        input_name = client.model_metadata(model)["inputs"][0]["name"]
        for batch in (1, 5):
            x = make_input(batch, seed=20 + batch)
            with torch.no_grad():
                ref = theirs(torch.from_numpy(x))
            (got,) = client.infer(model, {input_name: x}).values()
            _close(got, ref)


@pytest.mark.parametrize("name", [n for n, case in CASES.items() if case[2] is not None])
def test_random_ops_vary_per_call_in_graph(name):
    cls, _, noisy, make_input, classes = CASES[name]
    mine, _ = _twins(cls, noisy)
    mine.train()
    graph = _TrainGraph(mine, flow.optim.SGD(mine.parameters(), lr=0.0), classes)  # lr 0: only noise changes
    x, y = flow.tensor(make_input(4)), flow.tensor(_targets(name, 4, classes))
    losses = {round(float(graph(x, y)), 6) for _ in range(3)}
    assert len(losses) == 3


def test_gpt_generate_matches_torch_and_runs_in_a_graph():
    mine, theirs = _twins("GPT", {})
    mine.eval(), theirs.eval()
    start = _tokens(2, vocab=19)[:, :3]
    got = mine.generate(flow.tensor(start), 6, top_k=1)  # top-1: the sampler is exact
    with torch.no_grad():
        ref = theirs.generate(torch.from_numpy(start), 6, top_k=1)
    np.testing.assert_array_equal(got.numpy(), ref.numpy())
    flow.manual_seed(0)
    sampled = mine.generate(flow.tensor(start), 4, temperature=0.8, top_k=5)
    assert tuple(sampled.shape) == (2, 7) and int(sampled.max()) < 19

    class Forward(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = mine

        def build(self, idx):
            return self.model(idx)

    window = flow.tensor(_tokens(3, vocab=19))
    _close(Forward()(window), theirs(torch.from_numpy(window.numpy())))


def test_nanogpt_example_trains_in_a_graph(tmp_path):
    """examples/nanogpt_graph_train.py: the loss falls, the graph is saved and samples come out."""
    script = Path(__file__).resolve().parents[2] / "examples" / "nanogpt_graph_train.py"
    done = subprocess.run([sys.executable, str(script), "--steps", "40", "--out", str(tmp_path / "gpt")],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    losses = [float(line.split()[3]) for line in done.stdout.splitlines() if line.startswith("step")]
    assert losses[-1] < 0.8 * losses[0]
    assert (tmp_path / "gpt" / "flowserve.json").is_file() and "sample:" in done.stdout
