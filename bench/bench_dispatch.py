"""Per-op dispatch overhead: a tiny add (4 elements), flowserve eager vs PyTorch eager (CPU).

    python bench/bench_dispatch.py [--iters 50000]
"""

from __future__ import annotations

import argparse
import os
import time

import flowserve as flow


def per_call_us(fn, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def side_by_side(ours, theirs, iters: int, rounds: int = 5) -> tuple[float, float]:
    """Best per-call time of each, measured in alternating rounds so that load on a
    shared machine hits both alike."""
    per_call_us(ours, iters // 10), per_call_us(theirs, iters // 10)  # warm up
    best_ours = best_theirs = float("inf")
    for _ in range(rounds):
        best_ours = min(best_ours, per_call_us(ours, iters))
        best_theirs = min(best_theirs, per_call_us(theirs, iters))
    return best_ours, best_theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iters", type=int, default=50000)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    a, b = flow.randn(4), flow.randn(4)
    ta, tb = torch.randn(4), torch.randn(4)
    g = flow.randn(4, requires_grad=True)
    tg = torch.randn(4, requires_grad=True)
    rows = [
        ("a + b", *side_by_side(lambda: a + b, lambda: ta + tb, args.iters)),
        ("a + b, a requires grad", *side_by_side(lambda: g + b, lambda: tg + tb, args.iters)),
        ("a * 2.0 (scalar)", *side_by_side(lambda: a * 2.0, lambda: ta * 2.0, args.iters)),
    ]
    with flow.no_grad(), torch.no_grad():  # grad mode is per thread: a context-variable read
        rows.append(("a + b under no_grad", *side_by_side(lambda: a + b, lambda: ta + tb, args.iters)))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| tiny op (4 elements) | flowserve µs | PyTorch µs | flowserve / PyTorch |")
    print("|---|---|---|---|")
    for name, ours, theirs in rows:
        print(f"| {name} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    main()
