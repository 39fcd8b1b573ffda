"""Inference graphs with multi-head attention as ONNX Runtime's fused kernel
(``config.allow_fused_attention``, on by default: "fused") against the same graph with the
switch off ("plain": the attention's standard operators), then against PyTorch eager and
``torch.compile``: the Transformer encoder classifier of ``bench_graph.py`` (d_model 64,
4 heads, 2 layers, 128 tokens) at batch 1 and 32, ONNX Runtime's CPU provider.

The two graphs run in interleaved rounds of their own, timed by wall clock (fastest,
median) and by the process's CPU time per call (median; on a busy machine the steadier
figure, the runtime's threads sleeping between operators). PyTorch's threads spin for a
while after each call, and that CPU time would count against whatever runs next in the
process, so PyTorch runs in a second set of interleaved rounds with the fused graph,
timed by wall clock only. Ratios are peer time / fused graph time.

    python bench/bench_fused_attention.py                  # about 2 minutes
    python bench/bench_fused_attention.py --rounds 60 --batches 32
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

CASE = "transformer enc"


def graph_fn(model, x, fused: bool):
    graph = bg.InferGraph(model, "cpu")
    graph.config.allow_fused_attention(fused)
    graph(x)
    return lambda: graph(x).numpy()


def entries(batch: int) -> tuple[dict, dict]:
    """({"fused", "plain"} graph calls, {"fused", "torch", "compile"} calls) at ``batch``."""
    factory, shape, classes, _, vocab = bg.CASES[CASE]
    x = flow.tensor(bg.batch_of(shape, classes, batch, vocab)[0])
    flow.manual_seed(0)
    model = factory()
    model.eval()
    graphs = {"fused": graph_fn(model, x, True), "plain": graph_fn(model, x, False)}
    peers = {"fused": graphs["fused"]}
    if bg.torch is not None:
        peers["torch"] = bg.torch_infer_fn(CASE, batch)
        peers["compile"] = bg.torch_infer_fn(CASE, batch, compiled=True)
    return graphs, peers


def rounds_of(fns: dict, rounds: int) -> dict:
    """name -> (wall seconds per round, CPU seconds per round), the calls interleaved."""
    times = {k: ([], []) for k in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            times[key][0].append(time.perf_counter() - wall)
            times[key][1].append(time.process_time() - cpu)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="interleaved rounds per batch size")
    parser.add_argument("--batches", default="1,32", help="batch sizes, comma-separated")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; ms per call; the columns after | "
          "ran in their own rounds; ratios: peer time / fused graph time of the same rounds")
    columns = ("fused", "plain", "| fused", "torch", "compile")
    print(f"{'':<21}" + "".join(f"{k:>10}" for k in columns) + f"{'plain/fused':>13}{'compile/fused':>15}")
    for batch in (int(b) for b in args.batches.split(",")):
        graphs, peers = entries(batch)
        times = rounds_of(graphs, args.rounds)
        times.update({("| " if k == "fused" else "") + k: t for k, t in rounds_of(peers, args.rounds).items()})
        for label, stat in (("wall min", lambda t: min(t[0])), ("wall med", lambda t: np.median(t[0])),
                            ("cpu med", lambda t: np.median(t[1]))):
            ms = {k: stat(t) * 1e3 for k, t in times.items() if label != "cpu med" or k in graphs}
            row = f"{f'batch {batch}':<12}{label:<9}" + "".join(f"{ms.get(k, float('nan')):>10.2f}" for k in columns)
            ratios = [ms["plain"] / ms["fused"], ms.get("compile", float("nan")) / ms.get("| fused", float("nan"))]
            print(row + f"{ratios[0]:>12.2f}x{ratios[1]:>14.2f}x", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
