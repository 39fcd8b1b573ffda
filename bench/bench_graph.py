"""nn.Graph speed: one training step, graph vs eager flowserve vs PyTorch eager (CPU).

Models (the same architecture in each framework): MLP 784-512-512-10 (batch 256),
MobileNetV2 and ResNet-18 for CIFAR (batch 64), a Transformer encoder classifier
(batch 32, 128 tokens); plus the first-call compile time of the ResNet-18 training graph
and inference latency at batch 1 and 64 (graph vs eager). Goals: graph >= 3x flowserve
eager and >= 1x PyTorch eager per training step.

    python bench/bench_graph.py            # about 3 minutes on 2 cores
    python bench/bench_graph.py --quick    # fewer iterations
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flowserve as flow  # noqa: E402
import flowserve.models as models  # noqa: E402
import flowserve.nn as nn  # noqa: E402


# -- PyTorch twins of flowserve.models (same layers, shapes and defaults) -----------------

try:
    import torch
    from torch import nn as tnn
except ImportError:  # the bench then reports flowserve only
    torch = None

if torch is not None:
    def torch_mlp():
        return tnn.Sequential(tnn.Flatten(), tnn.Linear(784, 512), tnn.ReLU(), tnn.Linear(512, 512), tnn.ReLU(),
                             tnn.Linear(512, 10))


    def _conv_bn(inp, out, k=3, stride=1, groups=1):
        return tnn.Sequential(tnn.Conv2d(inp, out, k, stride, (k - 1) // 2, groups=groups, bias=False),
                             tnn.BatchNorm2d(out), tnn.ReLU6(inplace=True))


    class InvertedResidual(tnn.Module):
        def __init__(self, inp, oup, stride, t):
            super().__init__()
            hidden = int(round(inp * t))
            self.res = stride == 1 and inp == oup
            layers = [_conv_bn(inp, hidden, 1)] if t != 1 else []
            layers += [_conv_bn(hidden, hidden, 3, stride, hidden), tnn.Conv2d(hidden, oup, 1, bias=False),
                       tnn.BatchNorm2d(oup)]
            self.conv = tnn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.res else self.conv(x)


    def torch_mobilenet_v2(num_classes=10):
        setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                   [6, 320, 1, 1]]
        layers, inp = [_conv_bn(3, 32, 3, 2)], 32
        for t, c, n, s in setting:
            for i in range(n):
                layers.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                inp = c
        layers.append(_conv_bn(inp, 1280, 1))
        return tnn.Sequential(*layers, tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Dropout(0.2), tnn.Linear(1280, num_classes))


    class BasicBlock(tnn.Module):
        def __init__(self, inp, planes, stride=1):
            super().__init__()
            self.conv1 = tnn.Conv2d(inp, planes, 3, stride, 1, bias=False)
            self.bn1 = tnn.BatchNorm2d(planes)
            self.conv2 = tnn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = tnn.BatchNorm2d(planes)
            self.down = None
            if stride != 1 or inp != planes:
                self.down = tnn.Sequential(tnn.Conv2d(inp, planes, 1, stride, bias=False), tnn.BatchNorm2d(planes))

        def forward(self, x):
            identity = x if self.down is None else self.down(x)
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + identity)


    def torch_resnet18(num_classes=10):
        blocks, inp = [], 64
        for planes, stride in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)]:
            blocks.append(BasicBlock(inp, planes, stride))
            inp = planes
        return tnn.Sequential(tnn.Conv2d(3, 64, 3, 1, 1, bias=False), tnn.BatchNorm2d(64), tnn.ReLU(), *blocks,
                             tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(512, num_classes))


    class TransformerClassifier(tnn.Module):
        def __init__(self, vocab=1000, classes=2, d_model=64, nhead=4, layers=2, ff=128, max_len=128, dropout=0.1):
            super().__init__()
            self.embedding = tnn.Embedding(vocab, d_model)
            self.pos = tnn.Parameter(torch.zeros(1, max_len, d_model))
            layer = tnn.TransformerEncoderLayer(d_model, nhead, ff, dropout, "gelu", batch_first=True, norm_first=True)
            self.encoder = tnn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = tnn.LayerNorm(d_model)
            self.head = tnn.Linear(d_model, classes)

        def forward(self, tokens):
            x = self.embedding(tokens) + self.pos[:, :tokens.shape[1]]
            return self.head(self.norm(self.encoder(x)).mean(1))


    TORCH_MODELS = {"mlp 784-512-512-10": torch_mlp, "mobilenet_v2 cifar": torch_mobilenet_v2,
                    "resnet18 cifar": torch_resnet18,
                    "transformer enc": TransformerClassifier}
else:
    TORCH_MODELS = {}


class TrainGraph(nn.Graph):
    def __init__(self, model, optimizer, fuse_update: bool = True):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(optimizer)
        self.config.allow_fuse_model_update_ops(fuse_update)  # one flat update per group

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


class InferGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


CASES = {  # name: (flowserve factory, input shape, classes, batch, int input vocabulary)
    "mlp 784-512-512-10": (lambda: models.mlp(), (784,), 10, 256, None),
    "mobilenet_v2 cifar": (lambda: models.mobilenet_v2(num_classes=10), (3, 32, 32), 10, 64, None),
    "resnet18 cifar": (lambda: models.resnet18(num_classes=10), (3, 32, 32), 10, 64, None),
    "transformer enc": (lambda: models.transformer_classifier(vocab_size=1000, num_classes=2), (128,), 2, 32, 1000),
}


def batch_of(shape, classes, batch, vocab, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocab, (batch, *shape)) if vocab else rng.standard_normal((batch, *shape)).astype(np.float32)
    return x, rng.integers(0, classes, batch)


def timed(fn, iters: int) -> float:
    """Fastest seconds per call over ``iters`` calls (the least disturbed by other load)."""
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(min(times))


def interleaved(steps: dict, rounds: int) -> dict:
    """Fastest time of each step over ``rounds`` rounds that run every step in turn, so
    that load from other processes hits all of them alike."""
    best = {k: float("inf") for k in steps}
    for _ in range(rounds):
        for key, fn in steps.items():
            best[key] = min(best[key], timed(fn, 1))
    return best


def flowserve_step_fns(name, fuse_update=True):
    """(graph step, eager step, first-call seconds of the graph) on separate model copies."""
    factory, shape, classes, batch, vocab = CASES[name]
    x, y = (flow.tensor(a) for a in batch_of(shape, classes, batch, vocab))
    flow.manual_seed(0)
    graph_model, eager_model = factory(), factory()
    graph_model.train()
    eager_model.train()
    graph = TrainGraph(graph_model, flow.optim.SGD(graph_model.parameters(), lr=1e-3, momentum=0.9), fuse_update)
    start = time.perf_counter()
    graph(x, y)
    first_s = time.perf_counter() - start
    opt = flow.optim.SGD(eager_model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def eager_step():
        loss = loss_fn(eager_model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.numpy()

    eager_step()
    return (lambda: graph(x, y).numpy()), eager_step, first_s


def torch_step_fn(name):
    if torch is None:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    _, shape, classes, batch, vocab = CASES[name]
    x, y = (torch.tensor(a) for a in batch_of(shape, classes, batch, vocab))
    torch.manual_seed(0)
    model = TORCH_MODELS[name]()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    step()
    return step


def inference(name, batch, iters):
    factory, shape, classes, _, vocab = CASES[name]
    x = flow.tensor(batch_of(shape, classes, batch, vocab)[0])
    flow.manual_seed(0)
    model = factory()
    model.eval()
    graph = InferGraph(model)
    graph(x)

    def eager():
        with flow.no_grad():
            return model(x).numpy()

    eager()
    best = interleaved({"graph": lambda: graph(x).numpy(), "eager": eager}, iters)
    return best["graph"], best["eager"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--only", default=None, help="run the cases whose name contains this")
    parser.add_argument("--no-fuse-update", action="store_true",
                        help="graphs without config.allow_fuse_model_update_ops(True)")
    args = parser.parse_args()
    iters = 2 if args.quick else 4
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; fastest of interleaved rounds\n")
    print(f"{'training step (ms)':<22}{'graph':>9}{'eager':>9}{'torch':>9}{'vs eager':>10}{'vs torch':>10}")
    compile_resnet = step_resnet = None
    for name in CASES:
        if args.only and args.only not in name:
            continue
        slow = name.startswith(("mobilenet", "resnet"))
        graph_fn, eager_fn, first_s = flowserve_step_fns(name, not args.no_fuse_update)
        steps = {"graph": graph_fn, "eager": eager_fn}
        torch_fn = torch_step_fn(name)
        if torch_fn is not None:
            steps["torch"] = torch_fn
        best = interleaved(steps, 2 if slow else iters * 2)
        graph_s, eager_s, torch_s = best["graph"], best["eager"], best.get("torch", float("nan"))
        if name.startswith("resnet"):
            compile_resnet, step_resnet = first_s, graph_s
        print(f"{name:<22}{graph_s * 1e3:>9.1f}{eager_s * 1e3:>9.1f}{torch_s * 1e3:>9.1f}"
              f"{eager_s / graph_s:>9.2f}x{torch_s / graph_s:>9.2f}x", flush=True)
    if compile_resnet is not None:
        print(f"\nfirst call of the resnet18 training graph: {compile_resnet:.2f} s = trace + compile "
              f"{compile_resnet - step_resnet:.2f} s + one step {step_resnet:.2f} s")
    print(f"\n{'inference latency (ms)':<28}{'graph':>9}{'eager':>9}{'vs eager':>10}")
    for name in ("mlp 784-512-512-10", "resnet18 cifar"):
        if args.only and args.only not in name:
            continue
        for batch in (1, 64):
            rounds = 2 if name.startswith("resnet") and batch > 1 else iters * 2
            graph_s, eager_s = inference(name, batch, rounds)
            print(f"{name + f' b={batch}':<28}{graph_s * 1e3:>9.2f}{eager_s * 1e3:>9.2f}{eager_s / graph_s:>9.2f}x",
                  flush=True)


if __name__ == "__main__":
    main()
