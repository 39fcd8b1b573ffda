"""Training step time on a GPU: flowserve ``nn.Graph`` vs PyTorch eager vs ``torch.compile``.

Rows (model x precision): ResNet-50 224x224 batch 64, MobileNetV2 224x224 batch 64, a
Transformer encoder classifier (batch 32 x 512 tokens, d_model 512, 8 heads, 6 layers,
feed-forward 2048), each in float32 and in AMP (flowserve: ``graph.config.enable_amp(True)``,
float16 matmuls and convolutions with float32 master weights, plus a ``flow.amp.GradScaler``;
PyTorch: ``torch.autocast("cuda", dtype=torch.float16)`` plus ``torch.amp.GradScaler``;
``--amp-dtype bfloat16`` switches both).
SGD with momentum in both; dropout off. The same architecture in both frameworks, and the
PyTorch models get the flowserve model's initial weights (its ``state_dict``, copied in
order, shapes checked: ``bench_export.copy_weights``), so the first-step losses on the same
batch must agree.

Per row: ms/step of each (median over interleaved rounds of ``--steps`` steps, the device
synchronized around each round), the speedups torch_ms / graph_ms and compile_ms /
graph_ms, the first call of each (the graph traces and compiles, ``torch.compile``
compiles), the relative difference of the first-step losses, the loss after the timed steps,
and the peak GPU memory (PyTorch: ``torch.cuda.max_memory_allocated``; flowserve: the
process's memory read once from ``nvidia-smi`` after its steps, less PyTorch's reserved
pool, so it includes the CUDA contexts). ``torch.compile`` is timed after eager and graph in
each row, so a slow compile costs only its own number. A row prints (and appends one JSON
line to ``--out``) as soon as it is measured; a failing framework prints one line and the
rest go on; a row whose estimated time exceeds the ``--budget-s`` left is skipped.

TF32 is off in both (flowserve's CUDA provider has one switch for matmuls and convolutions
and its default is off; PyTorch's convolutions default to TF32) unless ``--tf32`` turns it
on in both; ``--cudnn-benchmark`` sets cuDNN's exhaustive algorithm search in both.

    python bench/bench_gpu_training.py --budget-s 150 --out rows.jsonl
    python bench/bench_gpu_training.py --device cpu --smoke     # every path, tiny sizes, on the CPU
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_export  # noqa: E402  (sibling script: copy_weights, flowserve's state into a twin)
import bench_graph  # noqa: E402  (sibling script: the PyTorch twins and the training graph)
import flowserve as flow  # noqa: E402
import flowserve.models as models  # noqa: E402
import torch  # noqa: E402
from tests.models.vision_architectures import vision_architectures  # noqa: E402

try:
    import cupy
except ImportError:  # a CPU-only machine: flowserve runs on numpy
    cupy = None


# -- the models, each framework's build of the same architecture ---------------------------


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model at one size: ``build(lib)`` makes it on ``flowserve`` or ``torch``."""

    name: str
    input_shape: tuple  # per sample
    classes: int
    batch: int
    vocab: int | None  # int token inputs drawn below this, else float32 images
    est_s: float  # rough seconds for its float32 row on an H100 (the budget check's first guess)
    build_kwargs: dict


def build_resnet50(lib, width, classes, **_):
    return vision_architectures(lib).ResNet(layers=(3, 4, 6, 3), width=width, classes=classes)


def build_mobilenet_v2(lib, classes, **_):
    if lib is flow:
        return models.mobilenet_v2(num_classes=classes, dropout=0.0)
    return bench_graph.torch_mobilenet_v2(num_classes=classes)  # its Dropout is set to 0 below


def build_transformer(lib, vocab, classes, d_model, nhead, layers, ff, max_len, **_):
    if lib is flow:
        return models.transformer_classifier(vocab, classes, d_model, nhead, layers, ff, max_len, dropout=0.0)
    return bench_graph.TransformerClassifier(vocab, classes, d_model, nhead, layers, ff, max_len, dropout=0.0)


BUILDERS = {"resnet50": build_resnet50, "mobilenet_v2": build_mobilenet_v2, "transformer": build_transformer}


def specs(smoke: bool) -> list:
    """The three models at the GPU sizes, or tiny ones for ``--smoke``."""
    if smoke:
        return [ModelSpec("resnet50", (3, 32, 32), 10, 4, None, 10.0, {"width": 8}),
                ModelSpec("mobilenet_v2", (3, 32, 32), 10, 4, None, 10.0, {}),
                ModelSpec("transformer", (16,), 10, 4, 100, 10.0,
                          {"d_model": 32, "nhead": 4, "layers": 2, "ff": 64, "max_len": 16})]
    return [ModelSpec("resnet50", (3, 224, 224), 1000, 64, None, 45.0, {"width": 64}),
            ModelSpec("mobilenet_v2", (3, 224, 224), 1000, 64, None, 35.0, {}),
            ModelSpec("transformer", (512,), 1000, 32, 1000, 35.0,
                      {"d_model": 512, "nhead": 8, "layers": 6, "ff": 2048, "max_len": 512})]


def build(spec: ModelSpec, lib):
    kwargs = dict(spec.build_kwargs, classes=spec.classes, vocab=spec.vocab)
    return BUILDERS[spec.name](lib, **kwargs)


def batch_of(spec: ModelSpec) -> tuple:
    return bench_graph.batch_of(spec.input_shape, spec.classes, spec.batch, spec.vocab)


# -- one training step per framework --------------------------------------------------------


@dataclasses.dataclass
class Runner:
    """A framework's training step: ``step()`` returns the loss without waiting for it,
    ``value(loss)`` reads it (synchronizing)."""

    step: object
    value: object
    first_s: float = float("nan")
    first_loss: float = float("nan")
    last_loss: float = float("nan")
    times: list = dataclasses.field(default_factory=list)
    mem_mib: float = float("nan")

    def start(self) -> None:
        start = time.perf_counter()
        self.first_loss = self.value(self.step())
        self.first_s = time.perf_counter() - start


def torch_runner(spec, model, x, y, amp: str | None, lr: float, compiled: bool) -> Runner:
    """``amp``: None for float32, else the autocast dtype's name (``"float16"``)."""
    device = x.device.type
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device, enabled=amp is not None)
    forward = bench_graph.compile_fresh(model) if compiled else model
    amp_dtype = getattr(torch, amp or "float16")

    def step():
        with torch.autocast(device, dtype=amp_dtype, enabled=amp is not None):
            loss = loss_fn(forward(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return Runner(step, lambda loss: float(loss.item()))


def torch_model(spec, state, device):
    torch.manual_seed(0)
    model = build(spec, torch)
    model.load_state_dict(state)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model.to(device).train()


def graph_runner(spec, model, x, y, amp: str | None, lr: float, device: str) -> Runner:
    model.to(device).train()
    provider = "cuda" if device == "cuda" else "cpu"
    graph = bench_graph.TrainGraph(model, flow.optim.SGD(model.parameters(), lr=lr, momentum=0.9), True, provider)
    if amp:
        graph.config.enable_amp(True, dtype=getattr(flow, amp))
        graph.set_grad_scaler(flow.amp.GradScaler())
    fx, fy = flow.tensor(x, device=device), flow.tensor(y, device=device)
    return Runner(lambda: graph(fx, fy), lambda loss: float(loss.numpy()))


# -- timing ----------------------------------------------------------------------------------


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        if cupy is not None:
            cupy.cuda.Device().synchronize()


def time_round(runner: Runner, steps: int, device: str) -> None:
    """One round: ``steps`` steps between two synchronizations; the last loss is read
    (which waits for it) before the clock stops."""
    synchronize(device)
    start = time.perf_counter()
    loss = None
    for _ in range(steps):
        loss = runner.step()
    runner.last_loss = runner.value(loss)
    synchronize(device)
    runner.times.append((time.perf_counter() - start) / steps)


def warm(runner: Runner, steps: int, device: str) -> None:
    runner.start()
    for _ in range(steps):
        runner.step()
    synchronize(device)


def ms(runner) -> float:
    return statistics.median(runner.times) * 1e3 if runner is not None and runner.times else float("nan")


def nvidia_smi_mib() -> float:
    """This process's GPU memory in MiB from ``nvidia-smi`` (nan where it cannot be read)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return float("nan")
    for line in out.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return float(used)
    return float("nan")


def free_device_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        if cupy is not None:
            cupy.get_default_memory_pool().free_all_blocks()


# -- rows ------------------------------------------------------------------------------------


class Budget:
    """The wall-clock budget of the whole run (``time.monotonic``)."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


class Report:
    """Prints each row as soon as it is measured and appends it as one JSON line to ``path``."""

    def __init__(self, path: str | None):
        self.path, self.rows = path, {}

    def fail(self, row: dict, framework: str, exc: BaseException) -> None:
        text = " ".join(str(exc).split())[:400]
        row.setdefault("errors", {})[framework] = f"{type(exc).__name__}: {text}"
        print(f"FAIL {row['model']}/{row['precision']} {framework}: {type(exc).__name__}: {text}", flush=True)

    def emit(self, row: dict) -> None:
        self.rows[(row["model"], row["precision"])] = row
        print(format_row(row), flush=True)
        if self.path:
            clean = {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            with open(self.path, "a") as f:
                f.write(json.dumps(clean) + "\n")
                f.flush()


def _ratio(peer_ms: float, graph_ms: float) -> float:
    return peer_ms / graph_ms if graph_ms == graph_ms and peer_ms == peer_ms else float("nan")


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def record(row: dict, key: str, runner: Runner | None) -> None:
    if runner is None:
        return
    row[f"{key}_ms"], row[f"{key}_first_s"] = ms(runner), runner.first_s
    row[f"{key}_first_loss"], row[f"{key}_last_loss"] = runner.first_loss, runner.last_loss
    row[f"{key}_mem_mib"], row[f"{key}_rounds"] = runner.mem_mib, len(runner.times)


def interleave(runners: dict, args, budget: Budget, row: dict, report: Report) -> None:
    """``args.rounds`` rounds, each timing every framework in turn (fewer, at least one,
    once the budget is spent); a framework that fails is dropped with one line, the others
    go on."""
    for done in range(args.rounds):
        if done and budget.left() <= 0:
            break
        for name in list(runners):
            try:
                time_round(runners[name], args.steps, args.device)
            except Exception as exc:  # one broken framework must not lose the others
                report.fail(row, name, exc)
                runners.pop(name)


def start_runner(name: str, make, args, row: dict, report: Report) -> Runner | None:
    if name != "graph" and args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        runner = make()
        warm(runner, args.warmup, args.device)
        return runner
    except Exception as exc:  # one broken framework must not lose the others
        report.fail(row, name, exc)
        return None


def eager_and_graph(spec, amp, args, budget, row, report) -> tuple:
    """Times PyTorch eager and the flowserve graph in interleaved rounds; returns the
    initial weights (a PyTorch state dict) and the batch, for the compile phase."""
    x_np, y_np = batch_of(spec)
    flow.manual_seed(0)
    initial = build(spec, flow)
    twin = build(spec, torch)
    bench_export.copy_weights(initial, twin)
    state = twin.state_dict()
    x, y = torch.tensor(x_np).to(args.device), torch.tensor(y_np).to(args.device)
    runners = {}
    runners["torch"] = start_runner(
        "torch", lambda: torch_runner(spec, torch_model(spec, state, args.device), x, y, amp, args.lr, False),
        args, row, report)
    runners["graph"] = start_runner(
        "graph", lambda: graph_runner(spec, initial, x_np, y_np, amp, args.lr, args.device), args, row, report)
    runners = {k: r for k, r in runners.items() if r is not None}
    interleave(runners, args, budget, row, report)
    if args.device == "cuda":
        if "torch" in runners:
            runners["torch"].mem_mib = torch.cuda.max_memory_allocated() / 2**20
        if "graph" in runners:
            runners["graph"].mem_mib = nvidia_smi_mib() - torch.cuda.memory_reserved() / 2**20
    for key in ("torch", "graph"):
        record(row, key, runners.get(key))
    return state, x, y


def compile_phase(spec, amp, args, budget, state, x, y, row, report) -> None:
    runner = start_runner(
        "compile", lambda: torch_runner(spec, torch_model(spec, state, args.device), x, y, amp, args.lr, True),
        args, row, report)
    if runner is None:
        return
    runners = {"compile": runner}
    interleave(runners, args, budget, row, report)
    if args.device == "cuda" and runners:
        runner.mem_mib = torch.cuda.max_memory_allocated() / 2**20
    record(row, "compile", runners.get("compile"))


def finish(row: dict) -> dict:
    graph_ms = row.get("graph_ms", float("nan"))
    row["speedup_vs_torch"] = _ratio(row.get("torch_ms", float("nan")), graph_ms)
    row["speedup_vs_compile"] = _ratio(row.get("compile_ms", float("nan")), graph_ms)
    if "graph_first_loss" in row and "torch_first_loss" in row:
        row["first_loss_rel_diff"] = _rel(row["graph_first_loss"], row["torch_first_loss"])
    return row


def run_row(spec, amp, args, budget, report) -> float:
    """Measures one row (and prints it); returns the seconds it took."""
    started = time.monotonic()
    row = {"model": spec.name, "precision": "amp" if amp else "fp32", "batch": spec.batch,
           "input": list(spec.input_shape), "device": args.device, "amp_dtype": amp, "steps": args.steps,
           "complete": args.no_compile}
    state, x, y = eager_and_graph(spec, amp, args, budget, row, report)
    report.emit(finish(row))
    if not args.no_compile:
        if budget.left() < args.compile_est_s:
            print(f"SKIP {spec.name}/{row['precision']} compile: needs ~{args.compile_est_s:.0f} s, "
                  f"{budget.left():.0f} s left", flush=True)
        else:
            free_device_memory(args.device)
            compile_phase(spec, amp, args, budget, state, x, y, row, report)
            row["complete"] = True
            report.emit(finish(row))
    free_device_memory(args.device)
    return time.monotonic() - started


# -- output ----------------------------------------------------------------------------------


def _f(value, spec: str, suffix: str = "") -> str:
    return "-" if value is None or value != value else f"{value:{spec}}{suffix}"


def format_row(row: dict) -> str:
    g = row.get
    first = ", ".join(f"{k} {_f(g(f'{k}_first_s'), '.1f', ' s')}" for k in ("graph", "torch", "compile")
                      if f"{k}_first_s" in row)
    loss = ", ".join(f"{k} {_f(g(f'{k}_last_loss'), '.4f')}" for k in ("graph", "torch", "compile")
                     if f"{k}_last_loss" in row)
    mem = ", ".join(f"{k} {_f(g(f'{k}_mem_mib'), '.0f', ' MiB')}" for k in ("graph", "torch", "compile")
                    if f"{k}_mem_mib" in row)
    return (f"{row['model']}/{row['precision']} b{row['batch']}: graph {_f(g('graph_ms'), '.2f')} ms, "
            f"torch {_f(g('torch_ms'), '.2f')} ms, compile {_f(g('compile_ms'), '.2f')} ms/step; "
            f"speedup vs torch {_f(g('speedup_vs_torch'), '.2f', 'x')}, "
            f"vs compile {_f(g('speedup_vs_compile'), '.2f', 'x')}\n"
            f"    first call: {first}; first-step loss rel diff graph/torch {_f(g('first_loss_rel_diff'), '.1e')}; "
            f"loss after timed steps: {loss}; peak memory: {mem}")


def markdown_table(rows) -> str:
    heads = ["model", "prec", "batch", "graph ms", "torch ms", "compile ms", "torch/graph", "compile/graph",
             "graph 1st s", "torch 1st s", "compile 1st s", "loss0 rel diff", "graph MiB", "torch MiB"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in rows:
        g = r.get
        cells = [r["model"], r["precision"], str(r["batch"]), _f(g("graph_ms"), ".2f"), _f(g("torch_ms"), ".2f"),
                 _f(g("compile_ms"), ".2f"), _f(g("speedup_vs_torch"), ".2f", "x"),
                 _f(g("speedup_vs_compile"), ".2f", "x"), _f(g("graph_first_s"), ".1f"),
                 _f(g("torch_first_s"), ".1f"), _f(g("compile_first_s"), ".1f"),
                 _f(g("first_loss_rel_diff"), ".1e"), _f(g("graph_mem_mib"), ".0f"), _f(g("torch_mem_mib"), ".0f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def selected_rows(args) -> list:
    """(spec, amp dtype name or None) in run order: per model float32, then AMP; ``--only`` keeps the rows whose
    ``model/precision`` contains one of its comma-separated words."""
    words = [w for w in (args.only or "").split(",") if w]
    rows = []
    for spec in specs(args.smoke):
        for amp in (None,) if args.no_amp else (None, args.amp_dtype):
            label = f"{spec.name}/{'amp' if amp else 'fp32'}"
            if not words or any(w in label for w in words):
                rows.append((spec, amp))
    if not rows:
        raise SystemExit(f"--only {args.only!r} matches no row (rows are model/precision, models "
                         f"{', '.join(BUILDERS)}, precisions fp32 and amp)")
    return rows


def configure(args) -> None:
    """The same math switches in both frameworks."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32
    flow.backends.cuda.matmul.allow_tf32 = flow.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = flow.backends.cudnn.benchmark = args.cudnn_benchmark
    if args.device == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)


def describe(args) -> str:
    if args.device == "cuda":
        where = f"{torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA {torch.version.cuda})"
    else:
        where = f"CPU, {os.cpu_count()} cores, torch {torch.__version__}"
    return (f"{where}; flowserve {flow.__version__}; steps {args.steps} x rounds {args.rounds} (median round), "
            f"warm-up {args.warmup}; tf32 {args.tf32}; cudnn benchmark {args.cudnn_benchmark}; "
            f"speedups are peer ms / graph ms")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (32x32 images, batch 4, 16 tokens)")
    parser.add_argument("--budget-s", type=float, default=240.0, help="wall-clock budget of the whole run")
    parser.add_argument("--out", default=None, help="append each row as a JSON line to this file")
    parser.add_argument("--only", default=None, help="comma-separated words; rows whose model/precision contains one")
    parser.add_argument("--no-amp", action="store_true", help="float32 rows only")
    parser.add_argument("--amp-dtype", default="float16", choices=("float16", "bfloat16"),
                        help="the low-precision dtype of the AMP rows, in both frameworks")
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile timing")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (the median is reported)")
    parser.add_argument("--warmup", type=int, default=3, help="steps after the first call before timing")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--tf32", action="store_true", help="TF32 matmuls and convolutions in both")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="cuDNN exhaustive algorithm search in both")
    parser.add_argument("--compile-est-s", type=float, default=None,
                        help="seconds left needed to start a row's torch.compile phase (default 60 on cuda, 30 on cpu)")
    args = parser.parse_args(argv)
    if args.compile_est_s is None:
        args.compile_est_s = 60.0 if args.device == "cuda" else 30.0
    if min(args.steps, args.rounds) < 1 or args.warmup < 0:
        parser.error(f"--steps and --rounds must be >= 1 and --warmup >= 0, got {args.steps}, {args.rounds}, "
                     f"{args.warmup}")
    if args.device == "cuda" and not (torch.cuda.is_available() and flow.cuda.is_available()):
        parser.error(f"--device cuda needs a GPU for torch and flowserve (torch sees one: "
                     f"{torch.cuda.is_available()}, flowserve: {flow.cuda.is_available()}); use --device cpu")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    budget = Budget(args.budget_s)
    configure(args)
    print(describe(args), flush=True)
    report, took = Report(args.out), {}
    for spec, amp in selected_rows(args):
        label = f"{spec.name}/{'amp' if amp else 'fp32'}"
        need = 1.2 * took.get(spec.name, spec.est_s)
        if budget.left() < need:
            print(f"SKIP {label}: needs ~{need:.0f} s, {budget.left():.0f} s left", flush=True)
            continue
        try:
            took[spec.name] = run_row(spec, amp, args, budget, report)
        except Exception as exc:  # a row that breaks outside any one framework
            report.fail({"model": spec.name, "precision": "amp" if amp else "fp32"}, "row", exc)
            free_device_memory(args.device)
    print("\n" + markdown_table(report.rows.values()), flush=True)


if __name__ == "__main__":
    main()
