"""``flow.save`` of a trained ResNet-18 (CIFAR) training graph, and of a called inference
graph of it: seconds per save, and how often ``build()`` and the model's ``forward`` ran
during the save (traces). Compares two source trees of flowserve in one run, each in its
own processes, interleaved (A, B, A, B, ...), and prints medians and the ratio B/A.

    python bench/bench_save.py --baseline-python /tmp/venv-main/bin/python --baseline-tree /path/to/main
    python bench/bench_save.py --one                 # one measurement with this tree, as JSON

The other tree runs this same file with its own interpreter, from its own directory
(``--one``; ``flowserve`` is the one that interpreter imports), so only the public ``flow``
API is used here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import flowserve as flow
from flowserve import models

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(batch: int, steps: int) -> dict:
    """One process: train the graph ``steps`` calls, save it, then call an inference graph once and save it."""
    flow.manual_seed(0)
    model = models.resnet18(num_classes=10)
    counts = {"forward": 0, "build": 0}
    forward = model.forward

    def counted_forward(*args, **kwargs):
        counts["forward"] += 1
        return forward(*args, **kwargs)

    object.__setattr__(model, "forward", counted_forward)

    class Train(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = flow.nn.CrossEntropyLoss()
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))

        def build(self, x, y):
            counts["build"] += 1
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    class Infer(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            counts["build"] += 1
            return self.model(x)

    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((batch, 3, 32, 32)).astype(np.float32))
    y = flow.tensor(rng.integers(0, 10, batch).astype(np.int64))
    train = Train()
    for _ in range(steps):
        train(x, y)
    out = {"tree": os.path.dirname(os.path.dirname(os.path.abspath(flow.__file__)))}
    with tempfile.TemporaryDirectory() as tmp:
        before = dict(counts)
        start = time.perf_counter()
        flow.save(train, os.path.join(tmp, "train"))
        out["train_save_s"] = time.perf_counter() - start
        out["train_builds"] = counts["build"] - before["build"]
        out["train_forwards"] = counts["forward"] - before["forward"]
        model.eval()
        infer = Infer()
        infer(x)
        before = dict(counts)
        start = time.perf_counter()
        flow.save(infer, os.path.join(tmp, "infer"))
        out["infer_save_s"] = time.perf_counter() - start
        out["infer_builds"] = counts["build"] - before["build"]
        out["infer_forwards"] = counts["forward"] - before["forward"]
        start = time.perf_counter()
        flow.save(infer, os.path.join(tmp, "infer_bare"), examples=[])  # without reference examples
        out["bare_save_s"] = time.perf_counter() - start
        manifest = json.loads(open(os.path.join(tmp, "train", "flowserve.json")).read())
        out["train_input_shape"] = manifest["inputs"][0]["shape"]
    return out


def _one(python: str, tree: str, batch: int, steps: int) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    run = subprocess.run([python, os.path.abspath(__file__), "--one", "--batch", str(batch), "--steps", str(steps)],
                         cwd=tree, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"{python} in {tree} failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", action="store_true", help="measure once with this interpreter, print JSON")
    parser.add_argument("--baseline-python", default=sys.executable)
    parser.add_argument("--baseline-tree", default=HERE)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--tree", default=HERE)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.batch, args.steps)))
        return
    sides = {"A (baseline)": (args.baseline_python, args.baseline_tree), "B (this tree)": (args.python, args.tree)}
    results: dict = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, (python, tree) in sides.items():
            results[name].append(_one(python, tree, args.batch, args.steps))
    print(f"flow.save of ResNet-18 CIFAR (batch {args.batch}, {args.steps} training calls), "
          f"median of {args.rounds} processes per side, interleaved")
    print("inference graph saves store its last call as reference examples (run by flowserve's interpreter); "
          "'bare' saves without them")
    print(f"{'side':<15} {'tree':<24} {'train save s':>12} {'builds':>6} {'forwards':>8} "
          f"{'infer save s':>12} {'bare s':>7} {'builds':>6} {'forwards':>8}  saved input shape")
    keys = ("train_save_s", "infer_save_s", "bare_save_s")
    medians = {}
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in keys}
        medians[name] = med
        last = runs[-1]
        print(f"{name:<15} {last['tree'][-24:]:<24} {med['train_save_s']:>12.3f} {last['train_builds']:>6} "
              f"{last['train_forwards']:>8} {med['infer_save_s']:>12.3f} {med['bare_save_s']:>7.3f} "
              f"{last['infer_builds']:>6} {last['infer_forwards']:>8}  {last['train_input_shape']}")
        print(f"{'':<15} samples: " + "; ".join(f"{k.removesuffix('_save_s')} " + ", ".join(f"{r[k]:.2f}" for r in runs)
                                              for k in keys))
    a, b = medians["A (baseline)"], medians["B (this tree)"]
    print(f"ratio B/A: training graph save {b['train_save_s'] / a['train_save_s']:.2f}x, inference graph save "
          f"{b['infer_save_s'] / a['infer_save_s']:.2f}x, without examples {b['bare_save_s'] / a['bare_save_s']:.2f}x "
          "(lower is faster)")


if __name__ == "__main__":
    main()
