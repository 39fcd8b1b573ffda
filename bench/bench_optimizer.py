"""Eager optimizer step on ResNet-18's parameters: flowserve vs PyTorch (CPU), one run.

The 62 parameters of ResNet-18 for CIFAR (11.2 M float32) with fixed random gradients;
one ``optimizer.step()`` timed per variant in interleaved rounds (every variant in turn,
fastest and median kept) so that load from other processes hits all of them alike:

- ``old``: with ``--before DIR``, the optimizer classes of another checkout's
  ``flowserve/optim/{sgd,adam,rmsprop}.py`` (an earlier commit: ``git worktree add DIR
  <commit>``) loaded on this flowserve, default options ("-" where it lacks the optimizer
  or an option);
- ``per-param``: flowserve with ``foreach=False``, the per-parameter functional update (the
  one nn.Graph compiles; the only one of RMSprop and LAMB);
- ``flowserve``: the default eager step, ``foreach=None`` (``flowserve.optim.foreach``);
- ``torch``: ``torch.optim`` with its CPU default and ``torch.set_num_threads(--threads)``;
  ``torch 1t`` the same on one thread (on a loaded machine, more threads can be slower).

Every variant takes the same steps on the same gradients, so the last column checks the
numbers: flowserve's parameters against PyTorch's (max difference relative to max |p|)
where OneFlow's rule is PyTorch's ("rule" where it is not: SGD's dampening, RMSprop's eps,
Adam without bias correction; LAMB has no PyTorch optimizer), and ``=`` when the fused and
per-parameter updates agree bit for bit.

    python bench/bench_optimizer.py                  # about two minutes on 2 cores
    python bench/bench_optimizer.py --rounds 20 --only Adam --before /tmp/flowserve_before
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

import numpy as np

import flowserve as flow
from flowserve.models import resnet18

try:
    import torch
except ImportError:  # the flowserve columns alone
    torch = None

# (optimizer, options, whether PyTorch's rule is OneFlow's for these options)
CASES = [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=5e-4), True),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True), True),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=5e-4, dampening=0.1), False),
    ("Adam", dict(lr=1e-3), True),
    ("Adam", dict(lr=1e-3, weight_decay=1e-4, amsgrad=True), True),
    ("Adam", dict(lr=1e-3, do_bias_correction=False), False),
    ("AdamW", dict(lr=1e-3, weight_decay=1e-2), True),
    ("AdamW", dict(lr=1e-3, weight_decay=1e-2, amsgrad=True), True),
    ("RMSprop", dict(lr=1e-3), False),
    ("RMSprop", dict(lr=1e-3, centered=True, momentum=0.9), False),
    ("LAMB", dict(lr=1e-3, weight_decay=1e-2), None),  # no PyTorch optimizer
]
FLAGS = ("nesterov", "dampening", "amsgrad", "centered", "do_bias_correction")


def label(name: str, options: dict) -> str:
    extra = [k if k != "do_bias_correction" else "no bias corr." for k in FLAGS if k in options]
    return name + (f" ({', '.join(extra)})" if extra else "")


def before_classes(root: str) -> dict:
    """The optimizer classes of ``root``'s ``flowserve/optim`` (another checkout) on this flowserve."""
    classes = {}
    for stem in ("sgd", "adam", "rmsprop"):
        path = Path(root) / "flowserve" / "optim" / f"{stem}.py"
        spec = importlib.util.spec_from_file_location(f"before_{stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        classes.update({k: v for k, v in vars(module).items() if isinstance(v, type)
                        and issubclass(v, flow.optim.Optimizer) and v.__module__ == module.__name__})
    return classes


def flow_step(params: list, grads: list, cls, options: dict, foreach="default"):
    ps = [flow.nn.Parameter(flow.tensor(p.copy())) for p in params]
    for p, g in zip(ps, grads):
        p.grad = flow.tensor(g)
    opt = cls(ps, **options) if foreach == "default" else cls(ps, foreach=foreach, **options)
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


def check(values: dict, torch_rule: bool) -> str:
    ours, plain = values["flowserve"](), values["per-param"]()
    same = all(np.array_equal(a, b) for a, b in zip(ours, plain))
    if "torch" not in values:
        return ("rule" if torch_rule is False else "-") + (" =" if same else " !=")
    theirs = values["torch"]()
    err = max(float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) for a, b in zip(ours, theirs))
    return f"{err:.1e}{' =' if same else ' !='}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds per optimizer")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch's intra-op threads")
    parser.add_argument("--only", default=None, help="run the optimizers whose label contains this")
    parser.add_argument("--before", default=None, help="a checkout whose flowserve/optim is timed as 'old'")
    args = parser.parse_args()
    old = before_classes(args.before) if args.before else {}
    rng = np.random.default_rng(0)
    params = [p.numpy().copy() for p in resnet18().parameters()]
    grads = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"optimizer.step() on ResNet-18 ({len(params)} tensors, {sum(p.size for p in params) / 1e6:.1f} M "
          f"float32), ms, fastest / median of {args.rounds} interleaved rounds "
          f"(load average {load:.1f}, {os.cpu_count()} cores, torch {args.threads} threads)")
    columns = ("old", "per-param", "flowserve", "torch", "torch 1t")
    print(f"{'optimizer':<26}" + "".join(f"{c:>15}" for c in columns) + f"{'vs torch':>10}{'vs 1t':>8}"
          f"{'vs old':>8}  check")
    for name, options, torch_rule in CASES:
        if args.only and args.only not in label(name, options):
            continue
        steps, values = variants(params, grads, name, options, torch_rule, old, args.threads)
        for fn in steps.values():  # first step: state allocation
            fn()
        times = interleaved(steps, args.rounds)
        best = {k: min(v) * 1e3 for k, v in times.items()}
        median = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        cells = [f"{best[k]:.1f} / {median[k]:.0f}" if k in best else "-" for k in columns]
        ratios = [best["flowserve"] / best.get(k, float("nan")) for k in ("torch", "torch 1t")]
        print(f"{label(name, options):<26}" + "".join(f"{c:>15}" for c in cells) + f"{ratios[0]:>9.2f}x"
              + f"{ratios[1]:>7.2f}x{best.get('old', float('nan')) / best['flowserve']:>7.2f}x  "
              + check(values, torch_rule), flush=True)


def variants(params, grads, name: str, options: dict, torch_rule: bool, old: dict, threads: int):
    """The timed steps of one case and their parameters' values, by column."""
    steps, values = {}, {}
    if name in old:
        try:
            steps["old"], values["old"] = flow_step(params, grads, old[name], options)
        except TypeError:  # an option the old optimizer lacks
            pass
    cls = getattr(flow.optim, name)
    steps["per-param"], values["per-param"] = flow_step(params, grads, cls, options,
                                                        False if cls._foreach_update else "default")
    steps["flowserve"], values["flowserve"] = flow_step(params, grads, cls, options)
    if torch is not None and hasattr(torch.optim, name) and "do_bias_correction" not in options:
        topts = {**options, "weight_decay": options.get("weight_decay", 0.0)}  # AdamW: PyTorch's default is 1e-2
        steps["torch"], values["torch"] = torch_step(params, grads, name, topts, threads)
        steps["torch 1t"], values["torch 1t"] = torch_step(params, grads, name, topts, 1)
    if not torch_rule:
        values.pop("torch", None)
    return steps, values


if __name__ == "__main__":
    main()
