"""ONNX Runtime's own profile of one graph-mode training step, summed by operator type,
for lowering variants compiled and run in the same interleaved rounds (a shared machine's
load falls on every variant alike).

    python bench/profile_ort_ops.py                     # resnet18 and mobilenet_v2, CIFAR b64
    python bench/profile_ort_ops.py --only resnet --rounds 5 --top 15
    python bench/profile_ort_ops.py --torch --no-profile   # step times with torch.compile's
    python bench/profile_ort_ops.py --variants "both,no channel affine" --no-profile --rounds 12
    python bench/profile_ort_ops.py --only resnet --variants both --nodes 15   # the costliest nodes
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from types import MappingProxyType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_graph as bg  # noqa: E402
import flowserve as flow  # noqa: E402
from flowserve.onnx_backend import lower, runtime  # noqa: E402
from flowserve.onnx_backend.lowering import conv as conv_lowering  # noqa: E402
from flowserve.onnx_backend.lowering import reduce as reduce_lowering  # noqa: E402


# variant name -> the graph config calls (method, argument) its graph is compiled with
VARIANTS = {
    "previous": (("allow_stacked_weight_gradient", False), ("allow_cpu_batch_norm_kernel", False)),
    "one product": (("allow_stacked_weight_gradient", True), ("allow_cpu_batch_norm_kernel", False)),
    "BN kernel": (("allow_stacked_weight_gradient", False), ("allow_cpu_batch_norm_kernel", True)),
    "both": (("allow_stacked_weight_gradient", True), ("allow_cpu_batch_norm_kernel", True)),
}

_plain_flipped_kernel = conv_lowering._flipped_kernel


def _no_channel_affine(b, metas, keep) -> int:
    return 0


def _no_full_rank_scalars(b, metas, keep) -> int:
    return 0


def _no_scale_shift(b, metas, keep) -> int:
    return 0


def _no_channel_sums(x, axes) -> bool:
    return False


def _flip_by_slice(b, w, shape, groups, by_product=False) -> str:
    return _plain_flipped_kernel(b, w, shape, groups)


_AFFINE_OFF = (lower, "fold_channel_affine", _no_channel_affine)
_FLIP_OFF = (conv_lowering, "_flipped_kernel", _flip_by_slice)
_SCALARS_OFF = (lower, "full_rank_scalars", _no_full_rank_scalars)
_SCALE_SHIFT_OFF = (lower, "fold_channel_scale_shift", _no_scale_shift)
_SUMS_OFF = (reduce_lowering, "_but_channels", _no_channel_sums)
# variant name -> (config calls, (module, function name, replacement) while its graph is
# lowered): lowering rewrites that have no config switch, turned off
LOWERING_VARIANTS = MappingProxyType({
    "no channel affine": (VARIANTS["both"], (_AFFINE_OFF,)),
    "flip by slice": (VARIANTS["both"], (_FLIP_OFF,)),
    "neither": (VARIANTS["both"], (_AFFINE_OFF, _FLIP_OFF)),
    "no full-rank scalars": (VARIANTS["both"], (_SCALARS_OFF,)),
    "no channel ops": (VARIANTS["both"], (_SCALE_SHIFT_OFF,)),
    "no channel sums": (VARIANTS["both"], (_SUMS_OFF,)),
    "no channel ops/sums": (VARIANTS["both"], (_SCALE_SHIFT_OFF, _SUMS_OFF)),
    "none of the three": (VARIANTS["both"], (_SCALARS_OFF, _SCALE_SHIFT_OFF, _SUMS_OFF)),
})


class _Profiled:
    """``runtime.session_options`` with ONNX Runtime's profiler on, files under ``folder``."""

    def __init__(self, folder: str):
        self.folder, self.plain = folder, runtime.session_options

    def __call__(self, **kwargs):
        so = self.plain(**kwargs)
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(self.folder, "step")
        return so


def _compile(name: str, settings, patches=None) -> tuple:
    factory, shape, classes, batch, vocab = bg.CASES[name]
    x, y = (flow.tensor(a) for a in bg.batch_of(shape, classes, batch, vocab))
    flow.manual_seed(0)
    model = factory()
    model.train()
    graph = bg.TrainGraph(model, flow.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9), True, "cpu")
    for method, value in settings:
        getattr(graph.config, method)(value)
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches or ()]
    try:
        for module, name, function in patches or ():
            setattr(module, name, function)
        loss = float(graph(x, y).numpy())
    finally:
        for module, name, function in saved:
            setattr(module, name, function)
    losses = [loss]
    return graph, (lambda: losses.append(float(graph(x, y).numpy()))), losses


def _by_op(path: str, skip_runs: int) -> tuple:
    """Per-op-type milliseconds of the fastest run (each op type's own fastest: a shared
    machine's load comes and goes within a run), node counts, the fastest session run and
    per node ``(op type, milliseconds of its fastest run)``, from a profile file, leaving out
    the first ``skip_runs`` runs (compilation, warm-up)."""
    events = json.load(open(path))
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])[skip_runs:]
    per_run = [collections.Counter() for _ in runs]
    counts = collections.Counter()
    nodes: dict = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        for i, r in enumerate(runs):
            if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]:
                op = e["args"].get("op_name", "?")
                per_run[i][op] += e["dur"]
                counts[op] += i == 0
                node = e["name"][:-len("_kernel_time")]
                nodes[node] = (op, min(nodes.get(node, (op, e["dur"]))[1], e["dur"]))
                break
    ops = {op: min(r[op] for r in per_run) / 1e3 for op in counts}
    nodes = {name: (op, us / 1e3) for name, (op, us) in nodes.items()}
    return ops, counts, min(r["dur"] for r in runs) / 1e3, nodes


def _origins(graph) -> dict:
    """ONNX node name -> the traced op it lowers, as ``op @ scope``; a backward op (no
    scope) is named by the scope of the nearest forward value it reads (``d:`` prefix), an
    optimizer's op by the first state it reads.
    The lowering emits each op's helper nodes before the node writing its output."""
    ir = graph._compiled.traced.ir
    producers = {out: node for node in ir.nodes for out in node.outputs}

    def scope_of(node) -> str:
        frontier, seen, state = [node], set(), None
        for _ in range(10):  # breadth-first over inputs, a few hops
            scoped = next((n.scope for n in frontier if n.scope), None)
            if scoped:
                return scoped if frontier[0] is node else f"d:{scoped}"
            state = state or next((i for n in frontier for i in n.inputs
                                   if ir.state_kinds.get(i, "constant") != "constant"), None)
            frontier = [producers[i] for n in frontier for i in n.inputs if i in producers and i not in seen]
            seen.update(i for n in frontier for i in n.outputs)
        return f"update of {state}" if state else "?"

    origins, pending = {}, []
    for onnx_node in graph._compiled.model.graph.node:
        pending.append(onnx_node.name)
        node = next((producers[o] for o in onnx_node.output if o in producers), None)
        if node is not None or any(o.endswith(":new") for o in onnx_node.output):
            origin = f"{node.op} @ {scope_of(node)}" if node is not None else "state update"
            origins.update((name, origin) for name in pending)
            pending = []
    return origins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=None)
    parser.add_argument("--top", type=int, default=14)
    parser.add_argument("--torch", action="store_true", help="time PyTorch under torch.compile in the same rounds")
    parser.add_argument("--variants", default=None,
                        help="comma-separated names from VARIANTS and LOWERING_VARIANTS (default: VARIANTS)")
    parser.add_argument("--no-profile", action="store_true", help="step times only (the profiler costs time)")
    parser.add_argument("--nodes", type=int, default=0, help="also list each variant's N costliest nodes")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    for name in ("resnet18 cifar", "mobilenet_v2 cifar"):
        if args.only and args.only not in name:
            continue
        with tempfile.TemporaryDirectory() as folder:
            built = {}
            variants = {**{v: (settings, None) for v, settings in VARIANTS.items()}, **LOWERING_VARIANTS}
            for variant, (settings, patches) in variants.items():
                if variant not in (args.variants.split(",") if args.variants else VARIANTS):
                    continue
                sub = os.path.join(folder, str(len(built)))
                os.makedirs(sub)
                runtime.session_options = runtime.session_options if args.no_profile else _Profiled(sub)
                try:
                    built[variant] = (*_compile(name, settings, patches), sub)
                finally:
                    runtime.session_options = getattr(runtime.session_options, "plain", runtime.session_options)
            steps = {variant: step for variant, (_, step, _, _) in built.items()}
            if args.torch and bg.torch is not None:
                steps["torch.compile"] = bg.torch_step_fn(name, compiled=True)
            wall, cpu = collections.defaultdict(list), collections.defaultdict(list)
            for _ in range(args.rounds):
                for variant, step in steps.items():
                    t, c = time.perf_counter(), time.process_time()
                    step()
                    wall[variant].append((time.perf_counter() - t) * 1e3)
                    cpu[variant].append((time.process_time() - c) * 1e3)
            table = {}
            for variant, (graph, _, loss, sub) in ({} if args.no_profile else built).items():
                path = graph._compiled.session.end_profiling()
                table[variant] = (*_by_op(path, 1), loss, len(graph._compiled.model.graph.node), _origins(graph))
        print(f"\n{name}: ms per step (op types: fastest run), {args.rounds} interleaved rounds; "
              f"load {os.getloadavg()[0]:.1f}")
        first = next(iter(wall))
        for variant in wall:
            print(f"  {variant:<20} wall min {min(wall[variant]):7.1f} median {statistics.median(wall[variant]):7.1f}  "
                  f"cpu min {min(cpu[variant]):7.1f} median {statistics.median(cpu[variant]):7.1f}  "
                  f"{first} / this: wall min {min(wall[first]) / min(wall[variant]):5.2f}x, "
                  f"median {statistics.median(wall[first]) / statistics.median(wall[variant]):5.2f}x, "
                  f"cpu median {statistics.median(cpu[first]) / statistics.median(cpu[variant]):5.2f}x")
        for variant, (_, _, losses, _) in built.items():
            print(f"  {variant:<20} losses {' '.join(f'{v:.6f}' for v in losses)}")
        if not table:
            continue
        for variant, (ops, counts, run, _, _, nodes, _) in table.items():
            print(f"  {variant:<20} fastest session run {run:7.1f}  nodes {nodes}  "
                  f"kernels (sum of each op type's fastest) {sum(ops.values()):7.1f}")
        keys = sorted(set().union(*(t[0] for t in table.values())),
                      key=lambda k: -max(t[0].get(k, 0) for t in table.values()))
        print(f"  {'op':<26}" + "".join(f"{v[:18]:>22}" for v in table))
        for k in keys[:args.top]:
            print(f"  {k:<26}" + "".join(f"{t[0].get(k, 0):>14.1f} ({t[1].get(k, 0):>4})" for t in table.values()))
        for variant, (_, _, _, per_node, _, _, origins) in table.items() if args.nodes else ():
            print(f"  {variant}: the {args.nodes} costliest nodes (ms, fastest run; the traced op each lowers)")
            for name, (op, ms) in sorted(per_node.items(), key=lambda kv: -kv[1][1])[:args.nodes]:
                print(f"    {ms:7.1f}  {op:<18} {name[:40]:<40} {origins.get(name, 'added by ONNX Runtime')}")


if __name__ == "__main__":
    main()
