"""Eager training step: flowserve eager vs PyTorch eager (CPU), one run, side by side.

Models as in ``bench_graph.py`` (whose PyTorch twins and inputs this reuses): MLP
784-512-512-10 (batch 256), MobileNetV2 and ResNet-18 for CIFAR (batch 64); SGD with
momentum. Steps run in interleaved rounds (every variant in turn, fastest time kept) so
that load from other processes hits all of them alike. ``--baseline REV`` adds a column
with the convolution kernels (``flowserve/ops/conv_kernels.py``) of git revision ``REV``
swapped in, for before/after figures from the same run.

    python bench/bench_eager.py                       # about 2 minutes on 2 cores
    python bench/bench_eager.py --baseline a996f95 --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_graph import TORCH_MODELS, eager_step_fn, interleaved, torch, torch_step_fn  # noqa: E402

import flowserve as flow  # noqa: E402
import flowserve.nn as nn  # noqa: E402
from flowserve.ops import conv as conv_ops  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["mlp 784-512-512-10", "mobilenet_v2 cifar", "resnet18 cifar"]


def kernels_at(rev: str):
    """``flowserve/ops/conv_kernels.py`` as it was at git revision ``rev``, as a module."""
    source = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:flowserve/ops/conv_kernels.py"],
                            capture_output=True, text=True, check=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "conv_kernels_baseline.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("conv_kernels_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_kernels(kernels, step):
    """``step`` run with ``kernels``' conv2d/conv_transpose2d behind the conv primitives."""

    def run():
        saved = conv_ops._conv2d, conv_ops._conv_transpose2d
        conv_ops._conv2d, conv_ops._conv_transpose2d = kernels.conv2d, kernels.conv_transpose2d
        try:
            return step()
        finally:
            conv_ops._conv2d, conv_ops._conv_transpose2d = saved

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per model")
    parser.add_argument("--baseline", default=None, help="git revision whose conv kernels to compare")
    parser.add_argument("--only", default=None, help="run the models whose name contains this")
    args = parser.parse_args()
    baseline = kernels_at(args.baseline) if args.baseline else None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"eager training step, fastest of {args.rounds} interleaved rounds, ms "
          f"(load average {load:.1f}, {os.cpu_count()} cores)")
    head = f"{'model':<22}" + (f"{'before':>9}" if baseline else "") + f"{'flowserve':>11}{'torch':>9}{'vs torch':>10}"
    print(head + (f"{'speedup':>9}" if baseline else ""))
    for name in NAMES:
        if args.only and args.only not in name:
            continue
        step = eager_step_fn(name)
        steps = {"flowserve": step}
        if baseline is not None:
            steps["before"] = with_kernels(baseline, step)
        if torch is not None and name in TORCH_MODELS:
            steps["torch"] = torch_step_fn(name)
        best = interleaved(steps, args.rounds)
        ours, theirs = best["flowserve"] * 1e3, best.get("torch", float("nan")) * 1e3
        row = f"{name:<22}" + (f"{best['before'] * 1e3:>9.0f}" if baseline else "")
        row += f"{ours:>11.0f}{theirs:>9.0f}{ours / theirs:>9.2f}x"
        print(row + (f"{best['before'] / best['flowserve']:>8.2f}x" if baseline else ""), flush=True)


if __name__ == "__main__":
    main()
