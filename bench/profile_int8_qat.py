"""Where a QAT int8 export's time goes, in minutes: MobileNetV2 (224x224 by default) exported
with ``--precision int8`` from a QAT graph, against its float32 export, without training.

    python bench/profile_int8_qat.py                                  # ~2 min, ~2 GB
    python bench/profile_int8_qat.py --qat-float classifier --size 32 --runs 40
    python bench/profile_int8_qat.py --keep /tmp/mnv2                 # keep the two .onnx files

Speed depends on the graph's structure (which ops, which QDQ pairs, which shapes), not on
trained values, so this builds the model ``bench_precision.py``'s ``*_qat`` rows measure in
the cheapest way that gives the same structure: an untrained float32 MobileNetV2 (BatchNorm
statistics from one batch), exported as the float32 reference, then ``--qat-steps`` QAT
steps (default 1, batch 2; the observers need one call to hold ranges) as a student of it,
with the modules of ``--qat-float`` left float32 (default: the 224x224 row's ``QAT_FLOAT``),
saved and exported with ``--precision int8`` (forced: an untrained model's top-1 agreement
means nothing). It prints what ONNX Runtime makes of the int8 model (op counts after its
QDQ fusions, ``ORT_ENABLE_EXTENDED``: any float op left between a DequantizeLinear and a
QuantizeLinear shows here), each model's profile by node kind at batch 1 and 32 (median of
``--profile-runs`` calls, ``bench_precision.op_profile``), and the int8 / float32 latency
ratios (``bench_precision.latency_ms``: alternating blocks, medians, 10th percentiles and,
with ``--threads 1``, the calling thread's CPU time, which the machine's other work does not
inflate).
"""

from __future__ import annotations

import argparse
import collections
import copy
import os
import pathlib
import shutil
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_precision as bp  # noqa: E402
import flowserve as flow  # noqa: E402
import flowserve.models as fm  # noqa: E402
from flowserve.exporter.verified import export_verified  # noqa: E402

EXAMPLE_ROWS = 16


class Inference(flow.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def build_models(root: pathlib.Path, size: int, qat_float: list, steps: int, batch: int) -> dict:
    """The float32 and the QAT int8 exports of one untrained MobileNetV2: {"fp32": path, "int8": path}."""
    make = lambda rows, seed: bp.images(rows, np.arange(rows) % bp.CLASSES, seed, size=size)  # noqa: E731
    flow.manual_seed(0)
    model = fm.mobilenet_v2(num_classes=bp.CLASSES)
    flow.optim.swa_utils.update_bn([flow.tensor(make(EXAMPLE_ROWS, 500))], model)
    model.eval()
    examples = flow.tensor(make(EXAMPLE_ROWS, 1000))
    graph = Inference(model)
    graph(examples[:2])
    flow.save(graph, root / "fp32", examples=[examples[:8], examples[8:]])
    paths = {"fp32": root / "fp32.onnx", "int8": root / "int8.onnx"}
    export_verified(root / "fp32", paths["fp32"], target="onnxruntime", rtol=1e-4)
    student = copy.deepcopy(model).train()
    for name in qat_float:
        student.get_submodule(name).qconfig = None
    qat = bp.DistillGraph(student, max(steps, 3))
    for step in range(steps):
        x = flow.tensor(make(batch, 3000 + step))
        qat(x, model(x).detach())
    flow.save(qat, root / "qat", examples=[examples[:8], examples[8:]])
    export_verified(root / "qat", paths["int8"], precision="int8", force=True)
    return paths


def fused_ops(path: pathlib.Path) -> collections.Counter:
    """Op counts of the model ONNX Runtime runs after its QDQ fusions (before layout changes)."""
    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--qat-float", default=",".join(bp.QAT_FLOAT["mobilenet_v2_224_qat"]),
                        help="comma-separated modules left float32 ('' for none)")
    parser.add_argument("--qat-steps", type=int, default=1)
    parser.add_argument("--qat-batch", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=24, help="timed calls per model and batch")
    parser.add_argument("--profile-runs", type=int, default=8, help="profiled calls per model and batch (0: none)")
    parser.add_argument("--keep", default=None, help="a folder to copy fp32.onnx and int8.onnx to")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp:
        qat_float = [m for m in args.qat_float.split(",") if m]
        paths = build_models(pathlib.Path(tmp), args.size, qat_float, args.qat_steps, args.qat_batch)
        print(f"# MobileNetV2 {args.size}x{args.size}, float32: {', '.join(qat_float) or 'none'}; built and exported "
              f"in {time.perf_counter() - started:.0f} s; onnxruntime {ort.__version__}, {args.threads} thread(s), "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        ops = fused_ops(paths["int8"])
        print("# int8 after ONNX Runtime's QDQ fusions: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
        if args.keep:
            pathlib.Path(args.keep).mkdir(parents=True, exist_ok=True)
            for path in paths.values():
                shutil.copy(path, pathlib.Path(args.keep) / path.name)
        sessions = {k: bp.session(p, args.threads) for k, p in paths.items()}
        name = sessions["fp32"].get_inputs()[0].name
        for batch in (1, 32):
            feed = {name: bp.images(batch, np.arange(batch) % bp.CLASSES, 9000, size=args.size)}
            if args.profile_runs:
                profiles = {k: bp.op_profile(p, feed, args.threads, args.profile_runs) for k, p in paths.items()}
                bp.print_profile(f"MobileNetV2 {args.size}", batch, profiles)
            latency = bp.latency_ms(sessions, feed, args.runs)
            fp32, low = latency["fp32"], latency["int8"]
            print(f"batch {batch:>2}: fp32 {fp32['median']:.2f} ms, int8 {low['median']:.2f} ms; int8 speedup "
                  f"{fp32['median'] / low['median']:.2f}x (p10 {fp32['p10'] / low['p10']:.2f}x"
                  + (f", cpu {fp32['cpu'] / low['cpu']:.2f}x" if args.threads == 1 else "") + ")", flush=True)
    print(f"# load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
