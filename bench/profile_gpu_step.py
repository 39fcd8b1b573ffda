"""Where a graph-mode training step spends its time on a CUDA GPU: ONNX Runtime's own
profile of the step's model on the CUDA provider, summed by operator type and by the
provider each node ran on (nodes without a CUDA kernel run on the CPU, with copies
around them), and the first call of an inference session at each new batch size (cuDNN
plans per input shape).

    python bench/profile_gpu_step.py                       # MobileNetV2 and ResNet-50, 224² b64
    python bench/profile_gpu_step.py --only mobilenet_v2 --top 20
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
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_gpu_training as gt  # noqa: E402
import bench_graph  # noqa: E402
from bench_graph import _feeds  # noqa: E402
from bench_serving import mobilenet_v2_model  # noqa: E402
import flowserve as flow  # noqa: E402
from flowserve.onnx_backend import providers, runtime  # noqa: E402


def step_profile(spec, top: int, device: str) -> None:
    model = gt.build(spec, flow).to(device).train()
    x, y = gt.batch_of(spec)
    graph = bench_graph.TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), True, device)
    fx, fy = flow.tensor(x, device=device), flow.tensor(y, device=device)
    for _ in range(2):
        graph(fx, fy).numpy()
    compiled = graph._compiled
    feeds = _feeds(graph, (flow.tensor(x), flow.tensor(y)))
    so = runtime.session_options()
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "step")
    session = ort.InferenceSession(compiled.model.SerializeToString(), so,
                                   providers=runtime.choose_providers(device))
    for _ in range(4):
        session.run(None, feeds)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    last = runs[-3]  # the last three runs
    by_op, by_provider, cpu_nodes = collections.Counter(), collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= last:
            provider = e["args"].get("provider", "?").replace("ExecutionProvider", "")
            by_op[(e["args"]["op_name"], provider)] += e["dur"]
            by_provider[provider] += e["dur"]
            if provider != "CUDA" and device == "cuda":
                cpu_nodes[e["args"]["op_name"]] += 1
    total = sum(by_op.values()) or 1
    run_ms = sum(e["dur"] for e in events if e.get("name") == "model_run" and e["ts"] >= last) / 3e3
    print(f"\n{spec.name} {spec.input_shape} b{spec.batch} training step on {device}: {len(compiled.model.graph.node)} nodes, "
          f"run {run_ms:.1f} ms, node time by provider "
          f"{ {p: f'{100 * t / total:.1f}%' for p, t in by_provider.items()} }")
    print(f"nodes on other providers (per 3 runs): {dict(cpu_nodes.most_common(12))}")
    print("| op | provider | share of node time | ms per step |\n|---|---|---:|---:|")
    for (op, provider), t in by_op.most_common(top):
        print(f"| {op} | {provider} | {100 * t / total:.1f}% | {t / 3e3:.2f} |")


def first_calls(device: str) -> None:
    """Milliseconds of the first and second call at each new batch size (MobileNetV2)."""
    session = providers.create_session(mobilenet_v2_model(), device=device)
    print("\n| batch | first call ms | second call ms |\n|---:|---:|---:|")
    for batch in (1, 5, 6, 7, 8, 13):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)
        times = []
        for _ in range(2):
            started = time.perf_counter()
            session.run(None, {"x": x})
            times.append(1e3 * (time.perf_counter() - started))
        print(f"| {batch} | {times[0]:.1f} | {times[1]:.1f} |")


def shape_switches(device: str, rounds: int = 6) -> None:
    """Milliseconds per call when calls alternate between batch 8 and 16 (each warmed),
    for each cuDNN algorithm search mode of the CUDA provider, and for one session per
    shape (MobileNetV2)."""
    model = mobilenet_v2_model().SerializeToString()
    xs = [np.random.default_rng(b).standard_normal((b, 3, 224, 224)).astype(np.float32) for b in (8, 16)]

    def session(mode):
        options = {"cudnn_conv_algo_search": mode} if device == "cuda" else {}
        providers = [("CUDAExecutionProvider", options), "CPUExecutionProvider"] if device == "cuda" else None
        return ort.InferenceSession(model, runtime.session_options(), providers=providers)

    def alternate(sessions):
        for s, x in zip(sessions, xs):  # warm each shape twice
            s.run(None, {"x": x})
            s.run(None, {"x": x})
        times = []
        for _ in range(rounds):
            for s, x in zip(sessions, xs):
                started = time.perf_counter()
                s.run(None, {"x": x})
                times.append(1e3 * (time.perf_counter() - started))
        return float(np.median(times)), max(times)

    print("\n| cuDNN search | sessions | median ms per call (8 and 16 alternating) | max ms |\n|---|---|---:|---:|")
    for mode in ("HEURISTIC", "EXHAUSTIVE", "DEFAULT"):
        shared = session(mode)
        print(f"| {mode} | one | %.1f | %.1f |" % alternate([shared, shared]))
    print("| HEURISTIC | one per shape | %.1f | %.1f |" % alternate([session("HEURISTIC"), session("HEURISTIC")]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mobilenet_v2,resnet50")
    parser.add_argument("--top", type=int, default=14)
    parser.add_argument("--device", default="cuda", help="cuda; cpu (with --smoke) to try the script out")
    parser.add_argument("--smoke", action="store_true", help="tiny models")
    parser.add_argument("--switches", action="store_true", help="the per-shape probes only, no training profile")
    args = parser.parse_args()
    first_calls(args.device)
    shape_switches(args.device)
    if args.switches:
        return
    for spec in gt.specs(args.smoke):
        if spec.name in args.only.split(","):
            step_profile(spec, args.top, args.device)


if __name__ == "__main__":
    main()
