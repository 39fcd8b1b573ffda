"""Per-op dispatch overhead: a tiny add (4 elements), flowserve eager vs PyTorch eager (CPU).

    python bench/bench_dispatch.py [--iters 50000]
"""

from __future__ import annotations

import argparse
import time

import flowserve as flow


def per_call_us(fn, iters: int) -> float:
    for _ in range(iters // 10):
        fn()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - start) / iters)
    return best * 1e6


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
        ("a + b", per_call_us(lambda: a + b, args.iters), per_call_us(lambda: ta + tb, args.iters)),
        ("a + b, a requires grad", per_call_us(lambda: g + b, args.iters), per_call_us(lambda: tg + tb, args.iters)),
        ("a * 2.0 (scalar)", per_call_us(lambda: a * 2.0, args.iters), per_call_us(lambda: ta * 2.0, args.iters)),
    ]
    print("| tiny op (4 elements) | flowserve µs | PyTorch µs | flowserve / PyTorch |")
    print("|---|---|---|---|")
    for name, ours, theirs in rows:
        print(f"| {name} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    main()
