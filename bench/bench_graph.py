"""nn.Graph speed: one training step, graph (each execution provider) vs eager flowserve vs PyTorch eager (CPU).

Models (the same architecture in each framework): MLP 784-512-512-10 (batch 256),
MobileNetV2 and ResNet-18 for CIFAR (batch 64), a Transformer encoder classifier
(batch 32, 128 tokens). Per model: the step time of the graph on ONNX Runtime's CPU
provider and on OpenVINO (where installed), of eager flowserve, of PyTorch eager and of
PyTorch under ``torch.compile`` (default mode; its first, compiling step is timed apart and
reported with the graphs' first calls), the graph's speedups over each, the node count of
the lowered ONNX and the op types that take the most time in ONNX Runtime's profile of one
step. Then the first-call time of the
ResNet-18 training graph and inference latency of every model at batch 1 and at its
training batch against PyTorch eager and ``torch.compile``.
Goals: training graph >= 1x PyTorch eager on the convnets and >= 1.5x on the MLP and
Transformer, >= 2x flowserve eager; inference graphs >= 1x torch.compile.

    python bench/bench_graph.py                      # about 5 minutes on a quiet 2-core machine
    python bench/bench_graph.py --only resnet --engines cpu --rounds 2
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
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
    def __init__(self, model, optimizer, fuse_update: bool = True, provider: str = "auto"):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(optimizer)
        self.config.allow_fuse_model_update_ops(fuse_update)  # one flat update per group
        self.config.set_execution_provider(provider)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


class InferGraph(nn.Graph):
    def __init__(self, model, provider: str = "auto"):
        super().__init__()
        self.model = model
        self.config.set_execution_provider(provider)

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


def engines(choice: str | None = None) -> list:
    """Graph execution providers to time: ONNX Runtime's CPU provider, and OpenVINO where
    it is installed (``--engines cpu,openvino`` picks)."""
    from flowserve.onnx_backend import openvino

    if choice:
        return choice.split(",")
    return ["cpu"] + (["openvino"] if openvino.available() else [])


def graph_step_fn(name, provider="cpu", fuse_update=True):
    """(graph step, the graph, first-call seconds) on a fresh model."""
    factory, shape, classes, batch, vocab = CASES[name]
    x, y = (flow.tensor(a) for a in batch_of(shape, classes, batch, vocab))
    flow.manual_seed(0)
    model = factory()
    model.train()
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9), fuse_update, provider)
    start = time.perf_counter()
    graph(x, y)
    return (lambda: graph(x, y).numpy()), graph, time.perf_counter() - start


def eager_step_fn(name):
    factory, shape, classes, batch, vocab = CASES[name]
    x, y = (flow.tensor(a) for a in batch_of(shape, classes, batch, vocab))
    flow.manual_seed(0)
    model = factory()
    model.train()
    opt = flow.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.numpy()

    step()
    return step


def compile_fresh(model):
    """``torch.compile(model)`` after clearing dynamo's caches: the bench compiles a dozen
    models and shapes in one process, past dynamo's recompile limit (8), beyond which it
    would silently run the rest eagerly."""
    torch._dynamo.reset()
    return torch.compile(model)


def torch_step_fn(name, compiled: bool = False):
    """PyTorch's training step (eager, or the model under ``torch.compile``'s default mode
    with ``compiled``); the first step, which compiles, runs here: ``.warm_s`` holds it."""
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
    forward = compile_fresh(model) if compiled else model

    def step():
        loss = loss_fn(forward(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    start = time.perf_counter()
    step()
    step.warm_s = time.perf_counter() - start
    return step


def _feeds(graph, args) -> dict:
    compiled = graph._compiled
    feeds = {v.name: a.numpy() for v, a in zip(compiled.traced.ir.inputs, args)}
    for name in compiled.fed_state:
        feed = compiled.traced.system_feeds.get(name)
        feeds[name] = feed() if feed is not None else compiled.traced.state[name].numpy().copy()
    return feeds


class CallSplit:
    """Splits each call of a graph step into ONNX Runtime's run (``run_with_iobinding``,
    timed inside the call) and the rest, the Python time per call: binding, buffers,
    output copies."""

    def __init__(self, graph, step):
        self.ort, self.python = [], []
        session = graph._compiled.session
        run = session.run_with_iobinding

        def timed_run(*a, **k):
            start = time.perf_counter()
            try:
                return run(*a, **k)
            finally:
                self.ort.append(time.perf_counter() - start)

        session.run_with_iobinding = timed_run
        self.step = step

    def __call__(self):
        start = time.perf_counter()
        before = len(self.ort)
        out = self.step()
        if len(self.ort) == before + 1:
            self.python.append(time.perf_counter() - start - self.ort[-1])
        return out


def profile(graph, args, steps: int = 4) -> tuple[int, list]:
    """(ONNX node count, [(op type, share of the step)]) of the graph's compiled model,
    from ONNX Runtime's profiler (CPU provider) over ``steps`` steps after a warm-up step
    (one step alone can catch a burst of other load: an MLP profile read "Add 54%" once)."""
    import onnxruntime as ort

    compiled = graph._compiled
    feeds = _feeds(graph, args)
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.intra_op_num_threads = os.cpu_count() or 1
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "step")
    session = ort.InferenceSession(compiled.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(1 + steps):
        session.run(None, feeds)
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    last = sorted(e["ts"] for e in events if e.get("name") == "model_run")[1]  # after the warm-up
    by_op: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= last:
            by_op[e["args"]["op_name"]] += e["dur"]
    total = sum(by_op.values()) or 1
    return len(compiled.model.graph.node), [(op, t / total) for op, t in by_op.most_common(6)]


def torch_infer_fn(name, batch, compiled: bool = False):
    """PyTorch's inference (eval mode, no grad), eager or under ``torch.compile``'s default
    mode with ``compiled``; the first call, which compiles, runs here."""
    if torch is None:
        return None
    _, shape, classes, _, vocab = CASES[name]
    x = torch.tensor(batch_of(shape, classes, batch, vocab)[0])
    torch.manual_seed(0)
    model = TORCH_MODELS[name]().eval()
    forward = compile_fresh(model) if compiled else model

    def run():
        with torch.no_grad():
            return forward(x).numpy()

    run()
    return run


def inference_fns(name, batch, providers) -> dict:
    factory, shape, classes, _, vocab = CASES[name]
    x = flow.tensor(batch_of(shape, classes, batch, vocab)[0])
    flow.manual_seed(0)
    model = factory()
    model.eval()
    fns = {}
    for provider in providers:
        graph = InferGraph(model, provider)
        graph(x)
        fns[provider] = lambda g=graph: g(x).numpy()

    def eager():
        with flow.no_grad():
            return model(x).numpy()

    eager()
    fns["eager"] = eager
    if torch is not None:
        fns["torch"] = torch_infer_fn(name, batch)
        fns["compile"] = torch_infer_fn(name, batch, compiled=True)
    return fns


def _ratio(best: dict, peer: str, key: str) -> str:
    return f"{best[peer] / best[key]:>8.2f}x" if peer in best else f"{'-':>9}"


def training_table(args, providers) -> None:
    peers = ["eager"] + (["torch", "compile"] if torch is not None else [])
    heads = "".join(f"{'graph:' + p:>15}" for p in providers) + "".join(f"{p:>9}" for p in peers)
    ratios = "".join(f"{p[:3] + ':' + peer[:5]:>11}" for p in providers for peer in peers)
    print(f"{'training step (ms)':<22}{heads}{ratios}{'nodes':>7}")
    compile_resnet, warm = None, {}
    for name in CASES:
        if args.only and args.only not in name:
            continue
        steps, graphs = {}, {}
        for provider in providers:
            steps[provider], graphs[provider], first_s = graph_step_fn(name, provider, not args.no_fuse_update)
            warm[(name, provider)] = first_s
            if name.startswith("resnet") and provider == providers[0]:
                compile_resnet = first_s
        split = steps[providers[0]] = CallSplit(graphs[providers[0]], steps[providers[0]])
        steps["eager"] = eager_step_fn(name)
        if torch is not None:
            steps["torch"] = torch_step_fn(name)
            steps["compile"] = torch_step_fn(name, compiled=True)
            warm[(name, "torch.compile")] = steps["compile"].warm_s
        slow = name.startswith(("mobilenet", "resnet"))
        best = interleaved(steps, args.rounds if slow else args.rounds * 4)
        nodes, top = profile(graphs[providers[0]], batch_args(name))
        session_ms = min(split.ort) * 1e3 if split.ort else float("nan")
        python_ms = float(np.median(split.python)) * 1e3 if split.python else float("nan")
        if name.startswith("resnet"):
            compile_resnet = (compile_resnet, best[providers[0]])
        row = f"{name:<22}" + "".join(f"{best[p] * 1e3:>15.1f}" for p in providers)
        row += "".join(f"{best.get(p, float('nan')) * 1e3:>9.1f}" for p in peers)
        row += "".join(_ratio(best, peer, p) + "  " for p in providers for peer in peers)
        print(row + f"{nodes:>7}", flush=True)
        print(f"{'':<4}ORT run {session_ms:.1f} ms (fastest), Python per call {python_ms:.2f} ms (median) "
              f"({providers[0]}); "
              f"top ops (ORT CPU): "
              + ", ".join(f"{op} {share:.0%}" for op, share in top), flush=True)
        print(f"{'':<4}first call (s, not in the step times): "
              + ", ".join(f"{k} {v:.1f}" for (n, k), v in warm.items() if n == name), flush=True)
    if compile_resnet is not None:
        first_s, step_s = compile_resnet
        print(f"\nfirst call of the resnet18 training graph ({providers[0]}): {first_s:.2f} s = trace + compile "
              f"{first_s - step_s:.2f} s + one step {step_s:.2f} s")


def batch_args(name):
    _, shape, classes, batch, vocab = CASES[name]
    return [flow.tensor(a) for a in batch_of(shape, classes, batch, vocab)]


def inference_table(args, providers) -> None:
    """Latency at batch 1 and at the training batch, every model; ratios against PyTorch
    eager and ``torch.compile`` measured in the same interleaved rounds."""
    peers = ["eager"] + (["torch", "compile"] if torch is not None else [])
    heads = "".join(f"{'graph:' + p:>15}" for p in providers) + "".join(f"{p:>9}" for p in peers)
    ratios = "".join(f"{p[:3] + ':' + peer[:5]:>11}" for p in providers for peer in peers[1:])
    print(f"\n{'inference latency (ms)':<26}{heads}{ratios}")
    for name, (_, _, _, train_batch, _) in CASES.items():
        if args.only and args.only not in name:
            continue
        for batch in (1, train_batch):
            best = interleaved(inference_fns(name, batch, providers), args.rounds * (4 if batch == 1 else 2))
            row = f"{name[:18] + f' b={batch}':<26}" + "".join(f"{best[p] * 1e3:>15.2f}" for p in providers)
            row += "".join(f"{best.get(p, float('nan')) * 1e3:>9.2f}" for p in peers)
            print(row + "".join(_ratio(best, peer, p) + "  " for p in providers for peer in peers[1:]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds for the convnets (x4 others)")
    parser.add_argument("--only", default=None, help="run the cases whose name contains this")
    parser.add_argument("--engines", default=None, help="graph providers to time, e.g. cpu,openvino")
    parser.add_argument("--no-inference", action="store_true", help="training steps only")
    parser.add_argument("--no-training", action="store_true", help="inference latency only")
    parser.add_argument("--no-fuse-update", action="store_true",
                        help="graphs without config.allow_fuse_model_update_ops(True)")
    args = parser.parse_args()
    providers = engines(args.engines)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; fastest of interleaved rounds; "
          f"ratios are speedups of the graph (peer time / graph time)\n")
    if not args.no_training:
        training_table(args, providers)
    if not args.no_inference:
        inference_table(args, providers)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
