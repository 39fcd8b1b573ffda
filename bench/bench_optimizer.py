"""Eager optimizer step on ResNet-18's parameters: flowserve vs PyTorch (CPU), one run.

The 62 parameters of ResNet-18 for CIFAR (11.2 M float32) with fixed random gradients;
one ``optimizer.step()`` timed per variant in interleaved rounds (every variant in turn,
fastest and median kept) so that load from other processes hits all of them alike:

- ``before``: flowserve with ``foreach=False``, the per-parameter functional update (the
  one nn.Graph compiles), which was the eager step before the multi-tensor update;
- ``flowserve``: the default eager step, ``foreach=None`` (``flowserve.optim.foreach``);
- ``torch``: ``torch.optim`` with its CPU default and ``torch.set_num_threads(--threads)``;
  ``torch 1t`` the same on one thread (on a loaded machine, more threads can be slower).

Every variant takes the same steps on the same gradients, so the last column checks the
numbers: flowserve's parameters against PyTorch's (max difference relative to max |p|),
and ``=`` when the fused and per-parameter updates agree bit for bit.

    python bench/bench_optimizer.py                  # about a minute on 2 cores
    python bench/bench_optimizer.py --rounds 20 --only Adam
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import flowserve as flow
from flowserve.models import resnet18

try:
    import torch
except ImportError:  # the flowserve columns alone
    torch = None

CASES = [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=5e-4)),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)),
    ("Adam", dict(lr=1e-3)),
    ("Adam", dict(lr=1e-3, weight_decay=1e-4, amsgrad=True)),
    ("AdamW", dict(lr=1e-3, weight_decay=1e-2)),
    ("AdamW", dict(lr=1e-3, weight_decay=1e-2, amsgrad=True)),
]


def label(name: str, options: dict) -> str:
    extra = [k for k in ("nesterov", "amsgrad") if options.get(k)]
    return name + (f" ({', '.join(extra)})" if extra else "")


def flow_step(params: list, grads: list, name: str, options: dict, foreach):
    ps = [flow.nn.Parameter(flow.tensor(p.copy())) for p in params]
    for p, g in zip(ps, grads):
        p.grad = flow.tensor(g)
    opt = getattr(flow.optim, name)(ps, foreach=foreach, **options)
    return opt.step, lambda: [p.numpy() for p in ps]


def torch_step(params: list, grads: list, name: str, options: dict, threads: int):
    ps = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    for p, g in zip(ps, grads):
        p.grad = torch.from_numpy(g)
    opt = getattr(torch.optim, name)(ps, **options)

    def step():
        torch.set_num_threads(threads)
        opt.step()

    return step, lambda: [p.detach().numpy() for p in ps]


def interleaved(steps: dict, rounds: int) -> dict:
    """Per variant, the step times of ``rounds`` rounds that run every variant in turn."""
    times = {k: [] for k in steps}
    for _ in range(rounds):
        for key, fn in steps.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return times


def check(values: dict) -> str:
    ours, before = values["flowserve"](), values["before"]()
    same = all(np.array_equal(a, b) for a, b in zip(ours, before))
    if "torch" not in values:
        return "=" if same else "!="
    theirs = values["torch"]()
    err = max(float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) for a, b in zip(ours, theirs))
    return f"{err:.1e}{' =' if same else ' !='}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds per optimizer")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch's intra-op threads")
    parser.add_argument("--only", default=None, help="run the optimizers whose label contains this")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    params = [p.numpy().copy() for p in resnet18().parameters()]
    grads = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"optimizer.step() on ResNet-18 ({len(params)} tensors, {sum(p.size for p in params) / 1e6:.1f} M "
          f"float32), ms, fastest / median of {args.rounds} interleaved rounds "
          f"(load average {load:.1f}, {os.cpu_count()} cores, torch {args.threads} threads)")
    print(f"{'optimizer':<20}{'before':>15}{'flowserve':>15}{'torch':>15}{'torch 1t':>15}{'vs torch':>10}"
          f"{'vs 1t':>8}{'speedup':>9}  check")
    for name, options in CASES:
        if args.only and args.only not in label(name, options):
            continue
        steps, values = {}, {}
        steps["before"], values["before"] = flow_step(params, grads, name, options, foreach=False)
        steps["flowserve"], values["flowserve"] = flow_step(params, grads, name, options, foreach=None)
        if torch is not None:
            steps["torch"], values["torch"] = torch_step(params, grads, name, options, args.threads)
            steps["torch 1t"], values["torch 1t"] = torch_step(params, grads, name, options, 1)
        for fn in steps.values():  # first step: state allocation
            fn()
        times = interleaved(steps, args.rounds)
        best = {k: min(v) * 1e3 for k, v in times.items()}
        median = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        cells = [f"{best[k]:.1f} / {median[k]:.0f}" if k in best else "-"
                 for k in ("before", "flowserve", "torch", "torch 1t")]
        ratios = [best["flowserve"] / best.get(k, float("nan")) for k in ("torch", "torch 1t")]
        print(f"{label(name, options):<20}" + "".join(f"{c:>15}" for c in cells) + f"{ratios[0]:>9.2f}x"
              + f"{ratios[1]:>7.2f}x{best['before'] / best['flowserve']:>8.1f}x  {check(values)}", flush=True)


if __name__ == "__main__":
    main()
