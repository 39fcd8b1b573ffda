"""ONNX Runtime latency of flowserve's export vs ``torch.onnx.export`` of the same
architecture with the same weights; fused vs unfused; node counts; export wall time.

    python bench/bench_export.py [--runs 30] [--threads 2]

The torch models are written here with the same attribute names as ``flowserve.models``,
so weights copy by ``state_dict`` key. ``torch.onnx.export(dynamo=False)``: the dynamo
exporter needs onnxscript, which flowserve does not install.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn as tnn

import flowserve as flow
import flowserve.models as fm
import flowserve.nn as nn
from flowserve.exporter import export


# -- the same architectures in PyTorch -------------------------------------------------------


class TorchMLP(tnn.Module):
    def __init__(self, sizes):
        super().__init__()
        layers = []
        for a, b in zip(sizes[:-2], sizes[1:-1]):
            layers += [tnn.Linear(a, b), tnn.ReLU()]
        self.layers = tnn.Sequential(*layers, tnn.Linear(sizes[-2], sizes[-1]))

    def forward(self, x):
        return self.layers(x)


class TorchBasicBlock(tnn.Module):
    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = tnn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(planes)
        self.relu = tnn.ReLU()
        self.conv2 = tnn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class TorchResNet18(tnn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(64)
        self.relu = tnn.ReLU()
        self.maxpool = tnn.Identity()
        inplanes, layers = 64, []
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            down = None
            if stride != 1 or inplanes != planes:
                down = tnn.Sequential(tnn.Conv2d(inplanes, planes, 1, stride, bias=False), tnn.BatchNorm2d(planes))
            layers.append(tnn.Sequential(TorchBasicBlock(inplanes, planes, stride, down), TorchBasicBlock(planes, planes)))
            inplanes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = tnn.AdaptiveAvgPool2d(1)
        self.fc = tnn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def torch_twin(flow_model, kind: str):
    """A PyTorch model of the same structure, for mlp and resnet18 (by ``state_dict`` keys)."""
    if kind == "resnet18":
        return TorchResNet18(flow_model.fc.out_features)
    sizes = [m.in_features for m in flow_model.modules() if isinstance(m, nn.Linear)]
    sizes.append([m for m in flow_model.modules() if isinstance(m, nn.Linear)][-1].out_features)
    return TorchMLP(sizes)


def copy_weights(flow_model, torch_model) -> None:
    source = {k: torch.from_numpy(v.numpy().copy()) for k, v in flow_model.state_dict().items()}
    torch_model.load_state_dict(source, strict=True)


# -- measuring -------------------------------------------------------------------------------


def session(model_bytes: bytes, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def latency_ms(sess, x: np.ndarray, runs: int) -> float:
    feed = {sess.get_inputs()[0].name: x}
    for _ in range(3):
        sess.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


class Graph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def torch_export(model, x: np.ndarray) -> tuple[bytes, float]:
    buf = io.BytesIO()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(x),), buf, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=18, dynamo=False)
    return buf.getvalue(), time.perf_counter() - start


def bench_model(name: str, model, make, runs: int, threads: int) -> list:
    model.eval()
    graph = Graph(model)
    graph(flow.tensor(make(2)))
    exports = {}
    for label, kwargs in (("fused", {"target": "onnxruntime"}), ("portable", {"target": "portable"}),
                          ("unfused", {"fuse": False})):
        start = time.perf_counter()
        result = export(graph, **kwargs)
        exports[label] = (result.model.SerializeToString(), time.perf_counter() - start,
                          len(result.model.graph.node))
    twin = torch_twin(model, name).eval()
    copy_weights(model, twin)
    tbytes, tsec = torch_export(twin, make(2))
    x3 = make(3)
    with torch.no_grad():
        diff = np.abs(twin(torch.from_numpy(x3)).numpy() - model(flow.tensor(x3)).numpy()).max()
    exports["torch"] = (tbytes, tsec, len(onnx.load_from_string(tbytes).graph.node))
    rows = []
    for batch in (1, 64):
        x = make(batch)
        ms = {k: latency_ms(session(v[0], threads), x, runs) for k, v in exports.items()}
        for k, (_, sec, nodes) in exports.items():
            rows.append((name, batch, k, nodes, sec, ms[k], ms[k] / ms["torch"], diff))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    flow.manual_seed(0)
    rng = np.random.default_rng(0)
    models = {
        "mlp": (fm.mlp(784, (512, 512), 10), lambda n: rng.standard_normal((n, 784)).astype(np.float32)),
        "resnet18": (fm.resnet18(num_classes=10), lambda n: rng.standard_normal((n, 3, 32, 32)).astype(np.float32)),
    }
    print(f"ONNX Runtime {ort.__version__}, ORT_ENABLE_ALL, {args.threads} threads, median of {args.runs} runs; "
          f"torch {torch.__version__} torch.onnx.export(dynamo=False, opset 18)")
    print(f"{'model':<10}{'batch':>6}  {'export':<9}{'nodes':>6}{'export s':>10}{'ORT ms':>10}{'vs torch':>10}")
    for name, (model, make) in models.items():
        for row in bench_model(name, model, make, args.runs, args.threads):
            m, b, k, nodes, sec, ms, ratio, diff = row
            print(f"{m:<10}{b:>6}  {k:<9}{nodes:>6}{sec:>10.2f}{ms:>10.3f}{ratio:>9.2f}x")
        print(f"{'':<10}  (torch twin vs flowserve eager: max |diff| {diff:.2g})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
