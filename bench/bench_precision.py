"""int8 vs float32: ONNX Runtime latency at batch 1 and 32 with the accuracy on the stored
examples, and the same models served over HTTP (binary tensors) at concurrency 32.

    python bench/bench_precision.py [--runs 60] [--threads 2] [--serve-seconds 8]   # ~5-8 min on 2 cores
    python bench/bench_precision.py --models mobilenet_v2 --profile   # + where the time goes, per op

``--profile`` adds ONNX Runtime's profiler view of each session at batch 1 and 32: the
milliseconds per call of every kind of node (median over calls; convolutions split into
pointwise, depthwise and full), after ONNX Runtime's own graph optimisation.

Models (``flowserve.models``): ResNet-18 and MobileNetV2 for CIFAR (3x32x32), and MobileNetV2
at 3x224x224, with static int8 (QDQ, per-channel, calibrated on the examples), and the Transformer encoder
classifier (128 tokens; default d_model 64, and a d_model 256 variant) with dynamic int8
(and static int8 for the default one). Each is trained a few steps (``TRAIN_STEPS``) in
graph mode on synthetic data whose classes are separable (so that top-1 agreement means
something), saved with 64 example rows, and exported with ``export_verified`` at each
precision: the accuracy columns are the export's proof on those examples against the
float32 reference outputs. Latency: median (and 10th percentile) of ``--runs`` calls per
session in blocks that alternate between the two sessions (load on the machine falls on
both alike).
Serving: one ``flowserve serve`` process with both variants as versions of one model,
driven by ``flowserve perf --compare``'s load generator, alternating between them.
Goals: int8 >= 2x faster than float32 on ResNet-18 and MobileNetV2 with top-1 agreement
>= 99%; int8-dynamic >= 1.5x on the Transformer.

QAT rows (``--models mobilenet_v2_qat``, ``mobilenet_v2_224_qat`` or ``resnet18_qat``): the
float32 model above, fine-tuned with quantization-aware training (``flowserve.ao.quantization``,
in graph mode, BatchNorm frozen at the float32 statistics) for ``QAT_STEPS`` steps as a
student of the float32 model on inputs drawn as the training data are, then exported with
``--precision int8`` (its learned scales, no calibration). The modules named in ``QAT_FLOAT`` (or
``--qat-float``) stay float32 (``qconfig = None``): MobileNetV2 at 224x224 keeps its first
convolution and its classifier float. ResNet-18's layers are fused by
name first, as a PyTorch user fuses them (``fuse_modules_qat``, ``QAT_FUSION``): its blocks
call ``conv1``/``bn1`` as attributes, outside an ``nn.Sequential``. Its top-1 agreement is measured
against the float32 model on ``HELD_OUT`` fresh inputs, beside the calibrated int8 export's
on the same inputs; speed: the QAT int8 model against the float32 export. Goals: agreement
>= 99%, >= 1.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
from types import MappingProxyType

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_serving  # noqa: E402  (free_port, start, stop)
import flowserve as flow  # noqa: E402
import flowserve.models as fm  # noqa: E402
import flowserve.nn as nn  # noqa: E402
from flowserve.ao import quantization as Q  # noqa: E402
from flowserve.clients.compare import run_compare  # noqa: E402
from flowserve.exporter.verified import export_verified, sidecar_path  # noqa: E402
from flowserve.models.resnet import BasicBlock  # noqa: E402
from flowserve.serialization import read_examples  # noqa: E402

CLASSES = 10
EXAMPLE_ROWS, EXAMPLE_BATCH = 64, 16


def images(rows: int, labels: np.ndarray, seed: int, size: int = 32) -> np.ndarray:
    templates = np.random.default_rng(99).standard_normal((CLASSES, 3, size, size)).astype(np.float32)
    noise = np.random.default_rng(seed).standard_normal((rows, 3, size, size)).astype(np.float32)
    return templates[labels] + 0.5 * noise


def tokens(rows: int, labels: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (labels[:, None] * 100 + rng.integers(0, 100, (rows, 128))).astype(np.int64)


MODELS = {  # name: (factory, inputs, precisions compared with fp32)
    "resnet18": (lambda: fm.resnet18(num_classes=CLASSES), images, ("int8",)),
    "mobilenet_v2": (lambda: fm.mobilenet_v2(num_classes=CLASSES), images, ("int8",)),
    # the same network at the 224x224 input it was designed for: at 32x32 its last stages run
    # on 2x2 and 1x1 maps, where per-node overhead, not arithmetic, sets the time
    "mobilenet_v2_224": (lambda: fm.mobilenet_v2(num_classes=CLASSES),
                         lambda rows, labels, seed: images(rows, labels, seed, size=224), ("int8",)),
    "transformer": (lambda: fm.transformer_classifier(vocab_size=1000, num_classes=CLASSES, dropout=0.0), tokens,
                    ("int8-dynamic", "int8")),
    # the same classifier four times wider (d_model 256, feed-forward 1024): MatMuls large
    # enough for int8 kernels to pay for quantizing activations per call
    "transformer_d256": (lambda: fm.transformer_classifier(vocab_size=1000, num_classes=CLASSES, d_model=256,
                                                           dim_feedforward=1024, dropout=0.0), tokens,
                         ("int8-dynamic",)),
}
# training steps per model: enough for the float32 model to learn the classes (its accuracy
# is the "fp32 acc" column). MobileNetV2 needs more than ResNet-18: after 4 steps it is near
# chance, its logits nearly tied, and top-1 agreement then measures the ties, not int8. The
# d_model 64 Transformer is at chance after 4 steps (9%), 83% after 16, 98% after 32.
TRAIN_STEPS = {"resnet18": 4, "mobilenet_v2": 40, "mobilenet_v2_224": 40, "transformer": 32, "transformer_d256": 4}


class TrainGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.Adam(model.parameters(), lr=1e-3))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def train_and_save(name: str, directory: pathlib.Path, steps: int) -> nn.Module:
    factory, make, _ = MODELS[name]
    flow.manual_seed(0)
    model = factory()
    graph = TrainGraph(model)
    for step in range(steps):
        y = np.random.default_rng(step).integers(0, CLASSES, 32)
        graph(flow.tensor(make(32, y, step)), flow.tensor(y))
    # BatchNorm's running statistics from data: after a few training steps they are still near
    # their initial values, and a deep network (MobileNetV2) would predict no better than chance
    y = np.random.default_rng(500).integers(0, CLASSES, 128)
    flow.optim.swa_utils.update_bn([flow.tensor(make(128, y, 500))], model)
    y = example_labels()
    data = flow.utils.data.TensorDataset(flow.tensor(make(EXAMPLE_ROWS, y, 1000)), flow.tensor(y))
    flow.save(graph, directory, examples=flow.utils.data.DataLoader(data, batch_size=EXAMPLE_BATCH))
    return model


def example_labels() -> np.ndarray:
    return np.arange(EXAMPLE_ROWS) % CLASSES


def session(path: pathlib.Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def latency_ms(sessions: dict, feed: dict, runs: int, rounds: int = 6) -> dict:
    """Per session, measured in alternating blocks: the median and 10th percentile of the
    wall time of a call and the median of the calling thread's CPU time, in ms. The 10th
    percentile is the speed of the calls the machine's other work did not interrupt (on a
    loaded 2-core machine the median of a 2-thread session is mostly the scheduler's); with
    one thread ONNX Runtime computes on the calling thread, so its CPU time is the kernels'
    time whatever else runs."""
    wall, cpu = {k: [] for k in sessions}, {k: [] for k in sessions}
    for _ in range(rounds):
        for k, sess in sessions.items():
            sess.run(None, feed)
            for _ in range(max(1, runs // rounds)):
                started, started_cpu = time.perf_counter(), time.thread_time()
                sess.run(None, feed)
                wall[k].append(time.perf_counter() - started)
                cpu[k].append(time.thread_time() - started_cpu)
    return {k: {"median": float(np.median(wall[k]) * 1e3), "p10": float(np.percentile(wall[k], 10) * 1e3),
                "cpu": float(np.median(cpu[k]) * 1e3)} for k in sessions}


def node_kinds(model: onnx.ModelProto) -> dict:
    """Node name -> its kind: the op type, convolutions split by shape (pw, dw, kxk)."""
    kinds = {}
    for node in model.graph.node:
        kind = node.op_type
        if "Conv" in node.op_type:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            kernel = list(attrs.get("kernel_shape", []))
            kind += "/dw" if attrs.get("group", 1) > 1 else "/pw" if kernel == [1, 1] else f"/{'x'.join(map(str, kernel))}"
        kinds[node.name] = kind
    return kinds


def op_profile(path: pathlib.Path, feed: dict, threads: int, runs: int) -> dict:
    """Node kind -> milliseconds per call (median over ``runs`` profiled calls)."""
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        kinds = node_kinds(onnx.load(options.optimized_model_filepath))
        options.optimized_model_filepath = ""
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "profile")
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            sess.run(None, feed)
        events = json.loads(pathlib.Path(sess.end_profiling()).read_text())
    per_kind = collections.defaultdict(list)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            node = event["name"][:-len("_kernel_time")]
            per_kind[kinds.get(node, event["args"]["op_name"])].append(event["dur"])
    out = {}
    for kind, durations in per_kind.items():
        calls = len(durations) // runs
        if calls:
            out[kind] = float(np.median(np.reshape(durations[:calls * runs], (runs, calls)).sum(1)) / 1e3)
    return out


def print_profile(name: str, batch: int, profiles: dict) -> None:
    kinds = sorted(set().union(*profiles.values()), key=lambda k: -max(p.get(k, 0.0) for p in profiles.values()))
    print(f"\n# {name}, batch {batch}: ms per call by node kind (ONNX Runtime profiler, median)")
    print(f"  {'node kind':<30}" + "".join(f"{p:>14}" for p in profiles))
    for kind in kinds[:14]:
        print(f"  {kind:<30}" + "".join(f"{p.get(kind, 0.0):>14.3f}" for p in profiles.values()))
    print(f"  {'sum':<30}" + "".join(f"{sum(p.values()):>14.3f}" for p in profiles.values()), flush=True)


def measure_model(name: str, root: pathlib.Path, args) -> list:
    directory = root / name
    started = time.perf_counter()
    train_and_save(name, directory, args.steps or TRAIN_STEPS[name])
    paths = {"fp32": root / f"{name}.fp32.onnx"}
    proofs = {"fp32": export_verified(directory, paths["fp32"], target="onnxruntime", rtol=1e-4).proof}
    for precision in MODELS[name][2]:
        paths[precision] = root / f"{name}.{precision}.onnx"
        result = export_verified(directory, paths[precision], precision=precision, min_agreement=0.0)
        proofs[precision] = result.proof
    print(f"# {name}: trained, saved and exported in {time.perf_counter() - started:.0f} s", flush=True)
    sessions = {p: session(path, args.threads) for p, path in paths.items()}
    input_name = sessions["fp32"].get_inputs()[0].name
    stored = read_examples(directory)
    examples = np.concatenate([next(iter(b.inputs.values())) for b in stored.batches])
    reference = np.concatenate([next(iter(b.outputs.values())) for b in stored.batches])
    accuracy = float(np.mean(reference.argmax(1) == example_labels()))  # has the float32 model learned?
    rows = []
    for batch in (1, 32):
        feed = {input_name: np.ascontiguousarray(examples[:batch])}
        latency = latency_ms(sessions, feed, args.runs)
        if args.profile:
            print_profile(name, batch, {p: op_profile(path, feed, args.threads, args.runs) for p, path in paths.items()})
        for precision in MODELS[name][2]:
            proof = proofs[precision]
            fp32, low = latency["fp32"], latency[precision]
            rows.append((name, precision, batch, fp32["median"], low["median"], fp32["median"] / low["median"],
                         fp32["p10"] / low["p10"], fp32["cpu"] / low["cpu"], accuracy, proof.agreement(),
                         max(r.max_rel_err for r in proof.records)))
    return rows


QAT_STEPS = {"mobilenet_v2_qat": 60, "mobilenet_v2_224_qat": 60, "resnet18_qat": 30}
HELD_OUT = 512
# modules left in float32 (``qconfig = None``) per QAT row: MobileNetV2 at 224x224 keeps its
# first convolution (3 input channels: ONNX Runtime's float32 kernel is faster than its
# int8 one there, and the raw input is not rounded) and its classifier (the logits are not
# rounded to uint8 steps, where near-tied classes would tie); both stay float32 in ONNX
# Runtime, which reads the first from the graph input and gives the second's output as the
# model's (a float layer between two quantized ones it would quantize itself, docs/export.md)
# Measured (docs/export.md): the same 98.63% held-out agreement as all-int8, 1.62x / 1.47x.
QAT_FLOAT = MappingProxyType({"mobilenet_v2_224_qat": ("features.0", "classifier")})


def resnet_fusion_groups(model: nn.Module) -> list:
    """The modules a PyTorch user fuses in a ResNet before ``prepare_qat``: the stem's
    conv/bn/relu, and in each ``BasicBlock`` conv1/bn1, conv2/bn2 and the shortcut's conv/bn;
    not the block's relu, which it calls twice (after bn1 and after the residual sum)."""
    groups = [["conv1", "bn1", "relu"]]
    for name, module in model.named_modules():
        if isinstance(module, BasicBlock):
            groups += [[f"{name}.conv1", f"{name}.bn1"], [f"{name}.conv2", f"{name}.bn2"]]
            if module.downsample is not None:
                groups.append([f"{name}.downsample.0", f"{name}.downsample.1"])
    return groups


QAT_FUSION = MappingProxyType({"resnet18": resnet_fusion_groups})  # model -> its fuse_modules_qat groups


class DistillGraph(nn.Graph):
    """QAT fine-tuning: the student's logits pulled to the float32 teacher's."""

    def __init__(self, student, steps: int):
        super().__init__()
        self.model = student
        # a small step keeps the student near the teacher
        self.add_optimizer(flow.optim.Adam(student.parameters(), lr=2e-5))
        self.config.enable_qat(True)
        # BatchNorm frozen at the float32 model's statistics from the first step: the student
        # trains the folded convolution the int8 model deploys (MobileNetV2 at 32x32, 60
        # steps: 99.41% top-1 agreement with the float32 model on the held-out inputs against
        # 98.24% with BatchNorm on batch statistics, docs/export.md); activation ranges
        # settle, then stay for the last third
        self.config.set_qat_config(moving_min_max_stop_update_after_iters=2 * steps // 3, freeze_bn_after=0)

    def build(self, x, teacher):
        loss = ((self.model(x) - teacher) ** 2).mean()
        loss.backward()
        return loss


def held_out_agreement(paths: dict, make, threads: int) -> dict:
    """Top-1 agreement of each model in ``paths`` with "fp32" on ``HELD_OUT`` fresh inputs."""
    sessions = {k: session(p, threads) for k, p in paths.items()}
    top = {k: [] for k in paths}
    for start in range(0, HELD_OUT, 32):
        y = np.random.default_rng(7000 + start).integers(0, CLASSES, 32)
        x = make(32, y, 7000 + start)
        for k, sess in sessions.items():
            top[k].append(sess.run(None, {sess.get_inputs()[0].name: x})[0].argmax(1))
    reference = np.concatenate(top["fp32"])
    return {k: float(np.mean(np.concatenate(v) == reference)) for k, v in top.items() if k != "fp32"}


def measure_qat(name: str, root: pathlib.Path, args) -> list:
    """The QAT row of ``name`` (``<model>_qat``): see the module docstring."""
    base = name[:-len("_qat")]
    make, steps = MODELS[base][1], args.qat_steps or QAT_STEPS[name]
    started = time.perf_counter()
    teacher = train_and_save(base, root / base, args.steps or TRAIN_STEPS[base])
    paths = {"fp32": root / f"{base}.fp32.onnx", "int8": root / f"{base}.int8.onnx",
             "int8-qat": root / f"{name}.int8.onnx"}
    export_verified(root / base, paths["fp32"], target="onnxruntime", rtol=1e-4)
    export_verified(root / base, paths["int8"], precision="int8", min_agreement=0.0)
    teacher.eval()
    student = copy.deepcopy(teacher).train()
    float_modules = QAT_FLOAT.get(name, ()) if args.qat_float is None else [m for m in args.qat_float.split(",") if m]
    for module in float_modules:
        student.get_submodule(module).qconfig = None
    if base in QAT_FUSION:
        Q.fuse_modules_qat(student, QAT_FUSION[base](student), inplace=True)
    graph = DistillGraph(student, steps)
    reference = session(paths["fp32"], args.threads)
    for step in range(steps):
        y = np.random.default_rng(3000 + step).integers(0, CLASSES, 32)
        x = make(32, y, 3000 + step)
        graph(flow.tensor(x), flow.tensor(reference.run(None, {reference.get_inputs()[0].name: x})[0]))
    y = example_labels()
    data = flow.utils.data.TensorDataset(flow.tensor(make(EXAMPLE_ROWS, y, 1000)))
    flow.save(graph, root / name, examples=flow.utils.data.DataLoader(data, batch_size=EXAMPLE_BATCH))
    # forced: the row is measured even where the one-step proof refuses the model (its summary says)
    proof = export_verified(root / name, paths["int8-qat"], precision="int8", force=True).proof
    print(f"# {name}: float32 trained, {steps} QAT steps (float32: {', '.join(float_modules) or 'none'}), "
          f"exported in {time.perf_counter() - started:.0f} s; {proof.summary()}", flush=True)
    agreement = held_out_agreement(paths, make, args.threads)
    timed = {k: session(paths[k], args.threads) for k in ("fp32", "int8-qat")}
    feed_name = timed["fp32"].get_inputs()[0].name
    rows = []
    for batch in (1, 32):
        x = make(batch, np.arange(batch) % CLASSES, 9000)
        latency = latency_ms(timed, {feed_name: x}, args.runs)
        fp32, low = latency["fp32"], latency["int8-qat"]
        rows.append((name, "int8 (QAT)", batch, fp32["median"], low["median"], fp32["median"] / low["median"],
                     fp32["p10"] / low["p10"], fp32["cpu"] / low["cpu"], agreement["int8"], agreement["int8-qat"],
                     max(r.max_rel_err for r in proof.records)))
    return rows


def served_comparison(root: pathlib.Path, name: str, precision: str, seconds: float) -> object:
    repo = root / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    for version, variant in ((1, "fp32"), (2, precision)):
        folder = repo / name / str(version)
        folder.mkdir(parents=True)
        shutil.copy(root / f"{name}.{variant}.onnx", folder / "model.onnx")
        shutil.copytree(sidecar_path(root / f"{name}.{variant}.onnx"), folder / "model.examples")
    (repo / name / "config.json").write_text(json.dumps({"version_policy": {"policy": "all"},
                                                         "max_batch_size": 32}))
    port = bench_serving.free_port()
    url = f"http://127.0.0.1:{port}"
    server = bench_serving.start([sys.executable, "-m", "flowserve.server", str(repo), "--http-port",
                                  str(port), "--no-grpc", "--log-level", "warning"], url)
    try:
        return asyncio.run(run_compare(url, f"{name}:1", f"{name}:2", concurrency=32, duration_s=seconds,
                                       rounds=4))
    finally:
        bench_serving.stop(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps for every model (default: TRAIN_STEPS, per model)")
    parser.add_argument("--qat-steps", type=int, default=None,
                        help="QAT fine-tuning steps of the *_qat rows (default: QAT_STEPS)")
    parser.add_argument("--qat-float", default=None,
                        help="comma-separated modules the *_qat rows leave in float32, e.g. features.0,classifier "
                             "('' for none; default: QAT_FLOAT, per row)")
    parser.add_argument("--serve-seconds", type=float, default=8.0)
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, of {', '.join(MODELS)}, {', '.join(QAT_STEPS)}")
    parser.add_argument("--profile", action="store_true",
                        help="also print where each session's time goes, per node kind (ONNX Runtime's profiler)")
    args = parser.parse_args()
    print(f"# onnxruntime {ort.__version__}, {args.threads} threads, load average before "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-precision-") as tmp:
        root = pathlib.Path(tmp)
        rows = []
        for name in args.models.split(","):
            rows += measure_qat(name, root, args) if name in QAT_STEPS else measure_model(name, root, args)
        print()
        cpu = args.threads == 1
        print("# ms: medians; speedup: of the medians, (p10) of the 10th percentiles"
              + (", (cpu) of the calling thread's CPU time" if cpu else ""))
        width = max([18] + [len(row[0]) + 2 for row in rows])  # mobilenet_v2_224_qat is 20 characters
        print(f"{'model':<{width}}{'precision':<14}{'batch':>6}{'fp32 ms':>10}{'low ms':>10}{'speedup':>9}{'(p10)':>8}"
              + (f"{'(cpu)':>8}" if cpu else "") + f"{'fp32 acc':>10}{'top-1 agree':>13}{'max rel err':>13}")
        for name, precision, batch, fp32, low, ratio, ratio_p10, ratio_cpu, accuracy, agree, rel in rows:
            if precision == "int8 (QAT)":  # accuracy: the calibrated int8's agreement on the held-out inputs
                print(f"{name:<{width}}{precision:<14}{batch:>6}{fp32:>10.3f}{low:>10.3f}{ratio:>8.2f}x"
                      f"{ratio_p10:>7.2f}x" + (f"{ratio_cpu:>7.2f}x" if cpu else "")
                      + f"{'':>10}{agree:>13.2%}{rel:>13.3g}   (calibrated int8: {accuracy:.2%} on the same "
                      f"{HELD_OUT} held-out inputs)")
                continue
            print(f"{name:<{width}}{precision:<14}{batch:>6}{fp32:>10.3f}{low:>10.3f}{ratio:>8.2f}x{ratio_p10:>7.2f}x"
                  + (f"{ratio_cpu:>7.2f}x" if cpu else "") + f"{accuracy:>10.0%}{agree:>13.2%}{rel:>13.3g}")
        print(f"\n# served over HTTP binary at concurrency 32 ({args.serve_seconds:.0f} s per variant, "
              "alternating), version 1 = fp32, version 2 = int8:")
        for name in args.models.split(","):
            if name in MODELS and "int8" in MODELS[name][2] and not name.startswith("transformer"):
                print(served_comparison(root, name, "int8", args.serve_seconds).table())
        print(f"# load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
