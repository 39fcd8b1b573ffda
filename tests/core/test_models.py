"""flowserve.models: PyTorch's state_dict keys and outputs (torch equivalents are built
inline from torch.nn), the documented MobileNetV2 CIFAR-10 loop, and eager vs nn.Graph
training from the same weights (3 steps, losses within 1e-4 relative).

About the learning rates of the eager-vs-graph checks: at torchvision's initialisation the
BatchNorm-normalised depthwise weights of MobileNetV2 are ~0.05 and the loss gradient has a
norm of ~250 on batch-8 CIFAR-shaped data, so lr 1e-7 already moves the loss ~1% per step;
with larger steps the trajectory amplifies float32 rounding (PyTorch's float32 and float64
runs drift apart the same way), which says nothing about eager vs graph.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import flowserve as flow
from flowserve import models, nn

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
tnn = torch.nn


# -- the torch equivalents (torchvision's structure, written with torch.nn) ----------------


class TorchConvBN(tnn.Sequential):
    def __init__(self, i, o, k=3, s=1, g=1):
        super().__init__(tnn.Conv2d(i, o, k, s, (k - 1) // 2, groups=g, bias=False), tnn.BatchNorm2d(o),
                         tnn.ReLU6(inplace=True))


class TorchInvertedResidual(tnn.Module):
    def __init__(self, inp, oup, stride, t):
        super().__init__()
        hidden, self.use_res = inp * t, stride == 1 and inp == oup
        layers = [TorchConvBN(inp, hidden, 1)] if t != 1 else []
        layers += [TorchConvBN(hidden, hidden, 3, stride, hidden), tnn.Conv2d(hidden, oup, 1, bias=False),
                   tnn.BatchNorm2d(oup)]
        self.conv = tnn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class TorchMobileNetV2(tnn.Module):
    def __init__(self, num_classes):
        super().__init__()
        setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                   [6, 320, 1, 1]]
        feats, c_in = [TorchConvBN(3, 32, s=2)], 32
        for t, c, n, s in setting:
            for i in range(n):
                feats.append(TorchInvertedResidual(c_in, c, s if i == 0 else 1, t))
                c_in = c
        self.features = tnn.Sequential(*feats, TorchConvBN(c_in, 1280, 1))
        self.classifier = tnn.Sequential(tnn.Dropout(0.2), tnn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(tnn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class TorchBasicBlock(tnn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = tnn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1, self.relu = tnn.BatchNorm2d(planes), tnn.ReLU(inplace=True)
        self.conv2, self.bn2 = tnn.Conv2d(planes, planes, 3, 1, 1, bias=False), tnn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = tnn.Sequential(tnn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                             tnn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + identity)


class TorchResNet18(tnn.Module):
    def __init__(self, num_classes, cifar):
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 64, 3, 1, 1, bias=False) if cifar else tnn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1, self.relu = tnn.BatchNorm2d(64), tnn.ReLU(inplace=True)
        self.maxpool = tnn.Identity() if cifar else tnn.MaxPool2d(3, 2, 1)
        widths, inplanes = [64, 128, 256, 512], 64
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", tnn.Sequential(TorchBasicBlock(inplanes, w, stride), TorchBasicBlock(w, w)))
            inplanes = w
        self.avgpool, self.fc = tnn.AdaptiveAvgPool2d((1, 1)), tnn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _copy_from_torch(t_model, f_model):
    f_model.load_state_dict({k: flow.tensor(v.detach().numpy()) for k, v in t_model.state_dict().items()})


def _assert_close(got, ref, what, rtol=1e-5):
    atol = rtol * max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.parametrize("name,f_make,t_make,shape", [
    ("mobilenet_v2", lambda: models.mobilenet_v2(num_classes=10), lambda: TorchMobileNetV2(10), (8, 3, 32, 32)),
    ("resnet18-cifar", lambda: models.resnet18(10), lambda: TorchResNet18(10, True), (2, 3, 32, 32)),
    ("resnet18-imagenet", lambda: models.resnet18(1000, cifar=False), lambda: TorchResNet18(1000, False),
     (2, 3, 64, 64)),
])
def test_state_dict_keys_and_outputs_match_torch(name, f_make, t_make, shape):
    torch.manual_seed(0)
    f_model, t_model = f_make(), t_make()
    assert list(f_model.state_dict()) == list(t_model.state_dict())
    _copy_from_torch(t_model, f_model)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for train in (True, False):
        f_model.train(train), t_model.train(train)
        if train:  # dropout off, batch statistics on
            f_model.apply(lambda m: setattr(m, "p", 0.0) if isinstance(m, nn.Dropout) else None)
            t_model.apply(lambda m: setattr(m, "p", 0.0) if isinstance(m, tnn.Dropout) else None)
        with torch.no_grad():
            ref = t_model(torch.tensor(x)).numpy()
        # float32 rounding grows through ~50 batch-normalised layers: compare at 1e-4 of the scale
        _assert_close(f_model(flow.tensor(x)).numpy(), ref, f"{name} train={train}", rtol=1e-4)


def test_model_heads_and_mobilenet_block_keys():
    assert models.mobilenet_v2(num_classes=1000).classifier[1].out_features == 1000
    keys = [k for k in models.mobilenet_v2().state_dict() if k.startswith("features.1.")]
    assert keys == [f"features.1.conv.0.0.weight"] + [f"features.1.conv.0.1.{b}" for b in
                                                      ("weight", "bias", "running_mean", "running_var",
                                                       "num_batches_tracked")] + \
        ["features.1.conv.1.weight"] + [f"features.1.conv.2.{b}" for b in
                                        ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")]
    assert models.mlp()(flow.randn(2, 1, 28, 28)).shape == (2, 10)
    assert [k for k in models.mlp(8, (4,), 2).state_dict()] == ["layers.0.weight", "layers.0.bias",
                                                               "layers.2.weight", "layers.2.bias"]


def test_documented_mobilenet_v2_eager_loop_runs():
    """The OneFlow tutorial's eager CIFAR-10 loop, verbatim but for synthetic data and 3 steps."""
    from flowserve.utils.data import DataLoader, TensorDataset

    flow.manual_seed(0)
    data = TensorDataset(flow.rand(24, 3, 32, 32), flow.randint(0, 10, (24,)))
    train_dataloader = DataLoader(data, 8, shuffle=True)
    model = models.mobilenet_v2()
    model.classifer = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))  # the tutorial's spelling
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)
    before = model.features[0][0].weight.numpy().copy()
    losses = []
    for x, y in train_dataloader:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert f"{loss:>7f}".strip() == f"{losses[-1]:.6f}"
    assert not np.array_equal(before, model.features[0][0].weight.numpy())
    assert int(model.features[0][1].num_batches_tracked) == 3


def _train_eager_and_graph(make, x, y, optimizer):
    flow.manual_seed(0)
    eager, graph_model = make(), make()
    graph_model.load_state_dict(eager.state_dict())
    loss_fn = nn.CrossEntropyLoss()
    eager_opt, graph_opt = optimizer(eager.parameters()), optimizer(graph_model.parameters())

    class GraphTrain(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = graph_model
            self.loss_fn = loss_fn
            self.add_optimizer(graph_opt)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    graph = GraphTrain()
    eager_losses, graph_losses = [], []
    for _ in range(3):
        loss = loss_fn(eager(x), y)
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
        eager_losses.append(loss.item())
        graph_losses.append(graph(x, y).item())
    return eager, graph_model, np.array(eager_losses), np.array(graph_losses)


def _small_convnet():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), nn.BatchNorm2d(4, momentum=None),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, groups=2), nn.GroupNorm(2, 4), nn.GELU(),
                         nn.Flatten(), nn.LayerNorm(16), nn.Linear(16, 3))


@pytest.mark.parametrize("name,make,data,optimizer", [
    ("small-convnet", _small_convnet, lambda: (flow.randn(4, 3, 8, 8), flow.randint(0, 3, (4,))),
     lambda ps: flow.optim.SGD(ps, lr=0.1, momentum=0.9)),
    ("mobilenet_v2", lambda: models.mobilenet_v2(num_classes=10, dropout=0.0),
     lambda: (flow.randn(8, 3, 32, 32), flow.randint(0, 10, (8,))), lambda ps: flow.optim.SGD(ps, lr=1e-7)),
    ("resnet18", lambda: models.resnet18(num_classes=10),
     lambda: (flow.randn(4, 3, 32, 32), flow.randint(0, 10, (4,))), lambda ps: flow.optim.SGD(ps, lr=1e-4)),
    ("transformer", lambda: models.transformer_classifier(50, 3, dropout=0.0),
     lambda: (flow.randint(0, 50, (8, 12)), flow.randint(0, 3, (8,))),
     lambda ps: flow.optim.SGD(ps, lr=0.05, momentum=0.9)),
])
def test_eager_and_graph_training_agree(name, make, data, optimizer):
    flow.manual_seed(1)
    x, y = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager, graph_model, eager_losses, graph_losses = _train_eager_and_graph(make, x, y, optimizer)
    # MobileNetV2's batch norms see 8 values per channel at its 1x1 maps here, which
    # amplify float32 rounding step after step: from the same weights, float64 eager
    # training gives losses 2.3536824, 2.3334713, 2.3144843; float32 eager is 6.5e-5 off
    # at step 3, the graph (NCHWc convolutions, each as accurate as a plain Conv) 1.3e-4
    # off, and other data seeds agree within 3e-6.
    rtol = 3e-4 if name == "mobilenet_v2" else 1e-4
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=rtol, err_msg=f"{name} losses per step")
    assert abs(eager_losses[-1] - eager_losses[0]) > 1e-3 * eager_losses[0], f"{name} did not train"
    for (key, e), g in zip(eager.state_dict().items(), graph_model.state_dict().values()):
        if "running" in key or "num_batches" in key:  # batch variances of 1x1 maps: 1e-3 of the scale
            _assert_close(g.numpy(), e.numpy(), f"{name} buffer {key}", rtol=1e-3)


class _LayerMix(nn.Module):
    """Layers whose composites must not bake the traced batch size into the exported graph."""

    def __init__(self):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear")
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.avg = nn.AvgPool2d(3, 2, 1, count_include_pad=False)
        self.norm = nn.GroupNorm(1, 3)
        self.deconv = nn.ConvTranspose2d(3, 4, 3, 2, 1, 1)
        self.adapt = nn.AdaptiveAvgPool2d((3, 5))

    def forward(self, x):
        return self.adapt(self.deconv(self.norm(self.avg(self.pool(self.up(x)))))).flatten(1)


@pytest.mark.parametrize("make,example,other", [
    (_LayerMix, lambda: flow.randn(2, 3, 8, 8), lambda: np.random.default_rng(0).standard_normal((5, 3, 8, 8))),
    (lambda: models.transformer_classifier(50, 3), lambda: flow.randint(0, 50, (2, 12)),
     lambda: np.random.default_rng(0).integers(0, 50, (5, 12))),
])
def test_saved_graph_exports_with_a_dynamic_batch(tmp_path, make, example, other):
    import onnxruntime as ort

    from flowserve.exporter import export

    model = make().eval()

    class Infer(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    graph = Infer()
    graph(example())
    flow.save(graph, tmp_path / "saved")
    result = export(tmp_path / "saved", tmp_path / "model.onnx", target="onnxruntime")
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    batch = other().astype(np.float32 if example().is_floating_point() else np.int64)
    got = session.run(None, {session.get_inputs()[0].name: batch})[0]
    _assert_close(got, model(flow.tensor(batch)).numpy(), "exported model at another batch size")
