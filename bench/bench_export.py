"""ONNX Runtime latency of flowserve's export vs ``torch.onnx.export`` of the same
architecture with the same weights; fused vs unfused; node counts; export wall time.

    python bench/bench_export.py [--runs 100] [--runs-large 20] [--threads 2]   # ~1-2 min on 2 cores

Models: MLP 784-512-512-10, ResNet-18 and MobileNetV2 for CIFAR (3x32x32), the Transformer
encoder classifier (128 tokens). The PyTorch twins are ``bench/bench_graph.py``'s; their
``state_dict`` entries come in the same order with the same shapes as ``flowserve.models``',
so weights copy by position, and each twin's output is checked against flowserve eager.
Latency is the median of ``--runs`` calls at batch 1 and ``--runs-large`` at batch 64.
``torch.onnx.export(dynamo=False)``: the dynamo exporter needs onnxscript, which flowserve
does not install.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_graph  # noqa: E402  (the PyTorch twins of flowserve.models)
import flowserve as flow  # noqa: E402
import flowserve.models as fm  # noqa: E402
import flowserve.nn as nn  # noqa: E402
from flowserve.exporter import export  # noqa: E402

TWINS = {"mlp": bench_graph.torch_mlp, "resnet18": bench_graph.torch_resnet18,
         "mobilenet_v2": bench_graph.torch_mobilenet_v2, "transformer": bench_graph.TransformerClassifier}


def copy_weights(flow_model, torch_model) -> None:
    """Copy flowserve's ``state_dict`` into the twin entry by entry (same order and shapes)."""
    source, target = flow_model.state_dict(), torch_model.state_dict()
    if len(source) != len(target):
        raise ValueError(f"twin has {len(target)} state entries, flowserve {len(source)}")
    copied = {}
    for (fname, value), (tname, ref) in zip(source.items(), target.items()):
        array = value.numpy()
        if tuple(array.shape) != tuple(ref.shape):
            raise ValueError(f"{fname} {tuple(array.shape)} does not fit twin's {tname} {tuple(ref.shape)}")
        copied[tname] = torch.from_numpy(array.copy())
    torch_model.load_state_dict(copied, strict=True)


# -- measuring -------------------------------------------------------------------------------


def session(model_bytes: bytes, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def latencies_ms(sessions: dict, x: np.ndarray, runs: int, rounds: int = 5) -> dict:
    """Median milliseconds of ``runs`` calls of each session, taken in ``rounds`` blocks per
    session (so that other load on the machine falls on every export alike), each block
    after one warm-up call. Not call by call: the spinning thread pool of the session that
    ran last slows the next one down (MobileNetV2 at batch 64: 9-11 ms alone, 23-29 ms
    interleaved with three other sessions)."""
    feed = {next(iter(sessions.values())).get_inputs()[0].name: x}
    times = {k: [] for k in sessions}
    for _ in range(rounds):
        for k, sess in sessions.items():
            sess.run(None, feed)
            for _ in range(max(1, runs // rounds)):
                start = time.perf_counter()
                sess.run(None, feed)
                times[k].append(time.perf_counter() - start)
    return {k: 1000 * float(np.median(t)) for k, t in times.items()}


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


def calibrate_batchnorm(model, make, batches: int = 3) -> None:
    """Running statistics from a few batches (at init they are 0 and 1, and MobileNetV2's
    outputs shrink to ~1e-10, too small for the twin check to mean anything)."""
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.momentum = None  # cumulative average of the batches
    model.train()
    with flow.no_grad():
        for _ in range(batches):
            model(flow.tensor(make(16)))
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum


def flowserve_exports(model, make) -> dict:
    """label -> (model bytes, export seconds, node count) for the three flowserve exports.

    ``check=False``: ``torch.onnx.export`` checks nothing either; the bench compares every
    export with flowserve eager itself (``relative_error``)."""
    graph = Graph(model)
    graph(flow.tensor(make(2)))
    exports = {}
    for label, kwargs in (("fused", {"target": "onnxruntime"}), ("portable", {"target": "portable"}),
                          ("unfused", {"fuse": False})):
        start = time.perf_counter()
        result = export(graph, check=False, **kwargs)
        exports[label] = (result.model.SerializeToString(), time.perf_counter() - start,
                          len(result.model.graph.node))
    return exports


def torch_twin_export(name: str, model, x: np.ndarray, ref: np.ndarray, make) -> tuple[tuple, float]:
    """The twin's export (bytes, seconds, nodes) and its eager output's error vs flowserve's."""
    twin = TWINS[name]().eval()
    copy_weights(model, twin)
    with torch.no_grad():
        error = relative_error(twin(torch.from_numpy(x)).numpy(), ref)
    tbytes, tsec = torch_export(twin, make(2))
    return (tbytes, tsec, len(onnx.load_from_string(tbytes).graph.node)), error


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref|."""
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


def bench_model(name: str, model, make, runs: dict, threads: int) -> tuple[list, float]:
    """Rows (batch, export, nodes, export s, ORT ms, ratio to torch, error vs flowserve eager)
    and the torch twin's eager error vs flowserve eager (checked before anything is timed)."""
    calibrate_batchnorm(model, make)
    model.eval()
    x = make(3)
    with flow.no_grad():
        ref = model(flow.tensor(x)).numpy().astype(np.float64)
    exports = flowserve_exports(model, make)
    exports["torch"], twin_error = torch_twin_export(name, model, x, ref, make)
    sessions = {k: session(v[0], threads) for k, v in exports.items()}
    feed = sessions["torch"].get_inputs()[0].name
    errors = {k: relative_error(sess.run(None, {feed: x})[0], ref) for k, sess in sessions.items()}
    rows = []
    for batch, n in runs.items():
        ms = latencies_ms(sessions, make(batch), n)
        rows += [(batch, k, nodes, sec, ms[k], ms[k] / ms["torch"], errors[k])
                 for k, (_, sec, nodes) in exports.items()]
    return rows, twin_error


def _inputs(rng):
    def images(n):
        return rng.standard_normal((n, 3, 32, 32)).astype(np.float32)

    return {
        "mlp": (fm.mlp(784, (512, 512), 10), lambda n: rng.standard_normal((n, 784)).astype(np.float32)),
        "resnet18": (fm.resnet18(num_classes=10), images),
        "mobilenet_v2": (fm.mobilenet_v2(num_classes=10), images),
        "transformer": (fm.transformer_classifier(vocab_size=1000, num_classes=2),
                        lambda n: rng.integers(0, 1000, (n, 128))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="timed calls at batch 1")
    parser.add_argument("--runs-large", type=int, default=20, help="timed calls at batch 64")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", default=None, help="run the models whose name contains this")
    args = parser.parse_args()
    flow.manual_seed(0)
    torch.set_num_threads(args.threads)
    models = _inputs(np.random.default_rng(0))
    runs = {1: args.runs, 64: args.runs_large}
    print(f"ONNX Runtime {ort.__version__}, ORT_ENABLE_ALL, {args.threads} threads, median of {args.runs} runs "
          f"(batch 1) / {args.runs_large} (batch 64); torch {torch.__version__} "
          f"torch.onnx.export(dynamo=False, opset 18); load average {os.getloadavg()[0]:.1f} at start")
    print("error: max |ORT - flowserve eager| / max |flowserve eager| at batch 3; export s: no parity check")
    print(f"{'model':<13}{'batch':>6}  {'export':<9}{'nodes':>6}{'export s':>10}{'ORT ms':>10}{'vs torch':>10}"
          f"{'error':>10}")
    for name, (model, make) in models.items():
        if args.only and args.only not in name:
            continue
        rows, twin_error = bench_model(name, model, make, runs, args.threads)
        for b, k, nodes, sec, ms, ratio, error in rows:
            print(f"{name:<13}{b:>6}  {k:<9}{nodes:>6}{sec:>10.2f}{ms:>10.3f}{ratio:>9.2f}x{error:>10.1e}")
        print(f"{'':<13}  (torch twin eager vs flowserve eager: error {twin_error:.1e})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
