"""Graph mode's lowering for ONNX Runtime's CPU provider against the previous one, in the
same interleaved rounds: one training step of each bench model (``bench_graph.CASES``)
with this lowering ("new"), with its CPU-provider rewrites switched off ("old": plain
``Conv`` for every convolution, linear weight gradients as transposed ``MatMul`` with the
momentum added apart, ``Identity`` copies of state updates, ``ReduceSum`` bias gradients,
weight gradients as matrix products from products of 8192 without the strided crop), PyTorch
eager and flowserve eager. Prints wall and CPU time (fastest, median) and the ratios;
on a busy machine the CPU times compare the lowerings best (the runtime's threads sleep
between operators, so CPU time is the work done).

    python bench/bench_cpu_lowering.py                 # every model, about 6 minutes
    python bench/bench_cpu_lowering.py --only resnet --rounds 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_graph as bg  # noqa: E402
import flowserve as flow  # noqa: E402
from flowserve.ir.passes import conv_weight_grad  # noqa: E402
from flowserve.onnx_backend.lowering import reduce as lowering_reduce  # noqa: E402
from flowserve.onnx_backend.lowering import training  # noqa: E402

NEW = dict(fuse=training.fuse_weight_gradient_gemms, write=training.write_state_outputs,
           crop=conv_weight_grad._cropped, depth=conv_weight_grad.MIN_DEPTH, rows=lowering_reduce.MIN_ROWS)


def _identities(b, updates, keep, suffix):
    return [b.op1("Identity", [value], state + suffix) for state, value in updates.items()]


def _lowering(new: bool) -> None:
    """Switch the rewrites on (this lowering) or off (the previous one) for graphs compiled next."""
    training.fuse_weight_gradient_gemms = NEW["fuse"] if new else (lambda b, keep: 0)
    training.write_state_outputs = NEW["write"] if new else _identities
    conv_weight_grad._cropped = NEW["crop"] if new else (lambda *a: None)
    conv_weight_grad.MIN_DEPTH = NEW["depth"] if new else 8192
    lowering_reduce.MIN_ROWS = NEW["rows"] if new else 10**12


def graph_step(name: str, new: bool):
    factory, shape, classes, batch, vocab = bg.CASES[name]
    x, y = (flow.tensor(a) for a in bg.batch_of(shape, classes, batch, vocab))
    flow.manual_seed(0)
    model = factory()
    model.train()
    graph = bg.TrainGraph(model, flow.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9), True, "cpu")
    graph.config.allow_cpu_blocked_kernels(new)
    _lowering(new)
    try:
        loss = float(graph(x, y).numpy())  # traces, lowers and compiles now
    finally:
        _lowering(True)
    return (lambda: graph(x, y).numpy()), loss, len(graph._compiled.model.graph.node)


def rounds_of(steps: dict, rounds: int) -> dict:
    wall = {k: [] for k in steps}
    cpu = {k: [] for k in steps}
    for _ in range(rounds):
        for key, fn in steps.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[key].append(time.perf_counter() - start)
            cpu[key].append(time.process_time() - start_cpu)
    return {k: (np.array(wall[k]) * 1e3, np.array(cpu[k]) * 1e3) for k in steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds for the convnets (x5 others)")
    parser.add_argument("--only", default=None, help="run the cases whose name contains this")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; ms per training step, "
          "interleaved rounds\n")
    print(f"{'model':<22}{'':>6}{'old':>9}{'new':>9}{'torch':>9}{'eager':>9}{'new/old':>9}"
          f"{'torch/old':>10}{'torch/new':>10}{'eager/new':>10}")
    for name in bg.CASES:
        if args.only and args.only not in name:
            continue
        old, old_loss, old_nodes = graph_step(name, False)
        new, new_loss, new_nodes = graph_step(name, True)
        steps = {"old": old, "new": new, "eager": bg.eager_step_fn(name)}
        if bg.torch is not None:
            steps["torch"] = bg.torch_step_fn(name)
        slow = name.startswith(("mobilenet", "resnet"))
        times = rounds_of(steps, args.rounds if slow else args.rounds * 5)
        for label, pick in (("wall", 0), ("cpu", 1)):
            for stat, f in (("min", np.min), ("med", np.median)):
                t = {k: float(f(v[pick])) for k, v in times.items()}
                torch_t = t.get("torch", float("nan"))
                print(f"{name if (label, stat) == ('wall', 'min') else '':<22}{label + ' ' + stat:>6}"
                      f"{t['old']:>9.1f}{t['new']:>9.1f}{torch_t:>9.1f}{t['eager']:>9.1f}"
                      f"{t['old'] / t['new']:>8.2f}x{torch_t / t['old']:>9.2f}x{torch_t / t['new']:>9.2f}x"
                      f"{t['eager'] / t['new']:>9.2f}x", flush=True)
        print(f"{'':<4}first loss old {old_loss:.6f} new {new_loss:.6f}; ONNX nodes {old_nodes} -> {new_nodes}")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
