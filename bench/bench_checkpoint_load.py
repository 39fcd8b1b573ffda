"""How fast does ``flow.load`` read a normal large PyTorch checkpoint, beside ``torch.load``?

A ResNet-50 state dict (torchvision's names and shapes, 25.6 M parameters, ~98 MiB) is
saved with ``torch.save`` and loaded by torch (``weights_only=True``), by flowserve's reader,
and optionally by another version of it (``--baseline path/to/torch_checkpoint.py``, e.g.
``git show v0.7.1:flowserve/serialization/torch_checkpoint.py > /tmp/old.py``). Prints the
best of ``--repeat`` wall times, the CPU time and the peak bytes tracemalloc sees, and the
ratio to torch.

    python bench/bench_checkpoint_load.py [--baseline /tmp/old.py] [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
import tracemalloc
from collections import OrderedDict
from pathlib import Path

import torch

from flowserve.serialization.torch_checkpoint import read_torch_checkpoint


def resnet50_state_dict() -> OrderedDict:
    g = torch.Generator().manual_seed(0)
    state = OrderedDict()

    def conv_bn(prefix: str, cin: int, cout: int, k: int, bn: str) -> None:
        state[f"{prefix}.weight"] = torch.randn(cout, cin, k, k, generator=g) * 0.05
        for name in ("weight", "bias", "running_mean", "running_var"):
            state[f"{bn}.{name}"] = torch.rand(cout, generator=g)
        state[f"{bn}.num_batches_tracked"] = torch.tensor(0)

    conv_bn("conv1", 3, 64, 7, "bn1")
    cin = 64
    for layer, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=1):
        for b in range(blocks):
            p = f"layer{layer}.{b}"
            conv_bn(f"{p}.conv1", cin, width, 1, f"{p}.bn1")
            conv_bn(f"{p}.conv2", width, width, 3, f"{p}.bn2")
            conv_bn(f"{p}.conv3", width, width * 4, 1, f"{p}.bn3")
            if b == 0:
                conv_bn(f"{p}.downsample.0", cin, width * 4, 1, f"{p}.downsample.1")
            cin = width * 4
    state["fc.weight"] = torch.randn(1000, 2048, generator=g) * 0.01
    state["fc.bias"] = torch.zeros(1000)
    return state


def measure(load, path: Path, repeat: int) -> tuple[float, float, int]:
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = load(path)
        best_wall, best_cpu = min(best_wall, time.perf_counter() - wall), min(best_cpu, time.process_time() - cpu)
        del result
    tracemalloc.start()
    result = load(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return best_wall, best_cpu, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another torch_checkpoint.py to time beside this one")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    loaders = {"torch.load": lambda p: torch.load(p, weights_only=True), "flowserve": read_torch_checkpoint}
    if args.baseline:
        spec = importlib.util.spec_from_file_location("baseline_torch_checkpoint", args.baseline)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaders["baseline"] = module.read_torch_checkpoint
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resnet50.pth"
        state = resnet50_state_dict()
        torch.save(state, path)
        del state
        print(f"ResNet-50 state dict: {path.stat().st_size / 2**20:.1f} MiB, torch {torch.__version__}")
        print(f"{'loader':<12} {'wall ms':>9} {'cpu ms':>9} {'peak MiB':>9} {'vs torch':>9}")
        rows = {name: measure(load, path, args.repeat) for name, load in loaders.items()}
        for name, (wall, cpu, peak) in rows.items():
            print(f"{name:<12} {wall * 1e3:>9.1f} {cpu * 1e3:>9.1f} {peak / 2**20:>9.1f} "
                  f"{wall / rows['torch.load'][0]:>8.2f}x")


if __name__ == "__main__":
    main()
