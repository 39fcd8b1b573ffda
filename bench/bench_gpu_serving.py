"""Serving on a CUDA GPU: ``flowserve serve --device cuda`` against ONNX Runtime's CUDA
provider in process, on the same ONNX, measured in one run.

Models: MobileNetV2 and ResNet-50 at 224² (random weights, batch norm folded), max batch
64. Three parts, each printed as it finishes (a run cut short keeps what it printed):

1. engine: images/s of ONNX Runtime CUDA in process at batch 1..64, three ways of
   feeding it: ``session.run`` on numpy arrays, the server's own IO binding
   (``flowserve.server.runner.DeviceIO``: reused device buffers), and IO binding from
   page-locked host memory (CuPy's pinned allocator; measured, not what the server does);
   plus float32 against float16 (``flowserve export --precision fp16``'s conversion).
2. server: the server under ``flowserve.clients.perf`` load (several client processes)
   at concurrency 1, 32 and 128, HTTP binary and gRPC: images/s, p50/p99 latency, the
   mean batch the server formed (its statistics), GPU utilisation (nvidia-smi), and the
   server's images/s over the engine's at that formed batch (the ceiling in process).
3. a JSON line per row in ``--out`` for the notes.

    python bench/bench_gpu_serving.py --out /tmp/gpu_serving.jsonl
    python bench/bench_gpu_serving.py --models mobilenet --seconds 3 --concurrencies 1,32
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from bench_serving import _ConvBuilder, _model, free_port, mobilenet_v2_model, server_compute, start, stop
from flowserve.clients.perf import run_load
from flowserve.exporter.precision import reduce_precision
from flowserve.onnx_backend.providers import create_session
from flowserve.onnx_backend.runtime import cuda_usable
from flowserve.server.runner import DeviceIO

BATCHES = (1, 4, 16, 32, 64)  # batches the engine is timed at; the server forms batches up to 64


def resnet50_model() -> onnx.ModelProto:
    """ResNet-50 (ImageNet head) with random weights, batch norm folded into the convs."""
    b = _ConvBuilder()
    b.inits += [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                numpy_helper.from_array(np.array(6, np.float32), "six")]

    def relu(x):
        b.nodes.append(helper.make_node("Relu", [x], [x + "_relu"]))
        return x + "_relu"

    x = relu(b.conv("x", 3, 64, 7, 2, relu6=False))
    b.nodes.append(helper.make_node("MaxPool", [x], ["pool0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    x, cin = "pool0", 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            h = relu(b.conv(x, cin, planes, relu6=False))
            h = relu(b.conv(h, planes, planes, 3, s, relu6=False))
            h = b.conv(h, planes, planes * 4, relu6=False)
            skip = b.conv(x, cin, planes * 4, 1, s, relu6=False) if (s != 1 or cin != planes * 4) else x
            b.nodes.append(helper.make_node("Add", [skip, h], [h + "_add"]))
            x, cin = relu(h + "_add"), planes * 4
    b.nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"]), helper.make_node("Flatten", ["gap"], ["flat"])]
    w = (b.rng.standard_normal((2048, 1000)) / np.sqrt(2048)).astype(np.float32)
    b.inits += [numpy_helper.from_array(w, "fc_w"), numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b")]
    b.nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"]))
    return _model(b.nodes, b.inits, [3, 224, 224], [1000])


MODELS = {"mobilenet": mobilenet_v2_model, "resnet50": resnet50_model}


def emit(args, row: dict) -> None:
    """Print ``row`` (one JSON line), keep it for the tables, append it to ``--out``."""
    args.rows.append(row)
    print(json.dumps(row), flush=True)
    if args.out is not None:
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


def _fmt(value, digits: int = 0) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else str(value)[:40]


def print_tables(rows: list) -> None:
    """The run's rows as markdown tables: ratios are within this run."""
    engine = [r for r in rows if r["part"] == "engine"]
    if engine:
        print("\n| model | batch | session.run img/s | IO binding img/s | pinned IO binding img/s | binding ÷ run |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in engine:
            print(f"| {r['model']} | {r['batch']} | {_fmt(r['run_numpy'])} | {_fmt(r['io_binding'])} | "
                  f"{_fmt(r['io_binding_pinned'])} | {r['io_binding'] / r['run_numpy']:.2f}x |")
    half = [r for r in rows if r["part"] == "fp16" and "error" not in r]
    if half:
        print("\n| model | batch | fp32 ms | fp16 ms | fp16 speed-up | top-1 agreement |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in half:
            print(f"| {r['model']} | {r['batch']} | {r['fp32_ms']:.2f} | {r['fp16_ms']:.2f} | {r['fp16_speedup']:.2f}x | "
                  f"{r['top1_agreement']:.1%} |")
    server = [r for r in rows if r["part"] == "server" and "error" not in r]
    if server:
        print("\n| model | protocol | c | img/s | p50 ms | p99 ms | formed batch | GPU util % | ÷ engine at that batch |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in server:
            print(f"| {r['model']} | {r['protocol']} | {r['c']} | {_fmt(r['images_s'])} | {r['p50_ms']:.2f} | "
                  f"{r['p99_ms']:.2f} | {r['formed_batch']:.1f} | {_fmt(r['gpu_util'])} | "
                  f"{r['server_over_engine']:.2f} (b{r['engine_batch']}) |")
    for r in rows:
        if "error" in r:
            print(f"failed: {r}")


def images(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 224, 224)).astype(np.float32)


def rate(call, batch: int, seconds: float) -> float:
    """Images/s of ``call`` (which returns host outputs, so it ends synchronised)."""
    for _ in range(3):
        call()
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        call()
        done += 1
    return done * batch / (time.perf_counter() - started)


def pinned_run(session, x: np.ndarray):
    """IO binding from a page-locked copy of ``x`` (CuPy's pinned memory), for comparison."""
    import cupyx  # local: a measurement-only dependency, present on the GPU machine

    host = cupyx.empty_pinned(x.shape, x.dtype)
    host[...] = x
    value = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, x.dtype, "cuda", 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", value)

    def call():
        value.update_inplace(host)
        binding.bind_output("y", "cuda", 0)
        session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()
    return call


def engine_part(name: str, model: onnx.ModelProto, args) -> dict:
    """In-process images/s per batch (IO binding, the server's way) and the other feeds."""
    session = create_session(model, device=args.device)
    io = DeviceIO(session, ["y"], device=args.device)
    ceiling = {}
    for batch in BATCHES:
        x = images(batch)
        want = session.run(["y"], {"x": x})[0]
        got = io.run({"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
        row = {"part": "engine", "model": name, "batch": batch,
               "run_numpy": rate(lambda: session.run(["y"], {"x": x}), batch, args.seconds / 2),
               "io_binding": rate(lambda: io.run({"x": x}), batch, args.seconds / 2)}
        try:
            row["io_binding_pinned"] = rate(pinned_run(session, x), batch, args.seconds / 2)
        except Exception as exc:
            row["io_binding_pinned"] = f"{type(exc).__name__}: {exc}"[:200]
        ceiling[batch] = row["io_binding"]
        emit(args, row)
    try:
        half = create_session(reduce_precision(model, "fp16", None), device=args.device)
        half_io = DeviceIO(half, ["y"], device=args.device)
        for batch in (1, 32):
            x = images(batch)
            fp32_ms = 1e3 * batch / rate(lambda: io.run({"x": x}), batch, args.seconds / 2)
            fp16_ms = 1e3 * batch / rate(lambda: half_io.run({"x": x}), batch, args.seconds / 2)
            top = np.argmax(io.run({"x": x})[0], 1) == np.argmax(half_io.run({"x": x})[0], 1)
            emit(args, {"part": "fp16", "model": name, "batch": batch, "fp32_ms": fp32_ms, "fp16_ms": fp16_ms,
                            "fp16_speedup": fp32_ms / fp16_ms, "top1_agreement": float(top.mean())})
    except Exception as exc:
        emit(args, {"part": "fp16", "model": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
    return ceiling


def _load_process(url, model, concurrency, seconds, protocol, seed):
    """One client process's share of the load (a top-level function: it crosses processes)."""
    x = images(1, seed)
    report = asyncio.run(run_load(url, model, concurrency, seconds, protocol, True, inputs={"x": x}, warmup_s=1.0))
    return report.requests, report.elapsed_s, report.errors, report.first_error, report.latencies_s


def load(url: str, model: str, concurrency: int, seconds: float, protocol: str, processes: int) -> dict:
    procs = max(1, min(processes, concurrency))
    shares = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    with concurrent.futures.ProcessPoolExecutor(procs) as pool:
        futures = [pool.submit(_load_process, url, model, c, seconds, protocol, i) for i, c in enumerate(shares)]
        results = [f.result() for f in futures]
    errors = sum(r[2] for r in results)
    if errors:
        raise RuntimeError(f"{errors} errors, first: {next(r[3] for r in results if r[3])}")
    latencies = sorted(x for r in results for x in r[4])
    return {"images_s": sum(r[0] for r in results) / statistics.mean(r[1] for r in results),
            "p50_ms": 1e3 * latencies[len(latencies) // 2], "p99_ms": 1e3 * latencies[int(len(latencies) * 0.99)]}


class GpuUtilisation:
    """nvidia-smi's utilisation.gpu sampled every 200 ms while the block runs (mean %)."""

    def __enter__(self):
        self.samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout.split()
                self.samples.append(float(out[0]))
            except Exception:
                return
            self._stop.wait(0.2)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def mean(self):
        return statistics.mean(self.samples) if self.samples else None


def nearest_ceiling(ceiling: dict, batch: float) -> tuple:
    """The engine's images/s at the measured batch nearest ``batch`` (from above where tied)."""
    best = min(ceiling, key=lambda b: (abs(b - batch), -b))
    return best, ceiling[best]


def server_part(models: dict, ceilings: dict, args, workdir: pathlib.Path) -> None:
    repo = workdir / "repo"
    for name, model in models.items():
        (repo / name / "1").mkdir(parents=True)
        onnx.save(model, repo / name / "1" / "model.onnx")
        (repo / name / "config.json").write_text(json.dumps({"max_batch_size": 64, "instance_count": args.instances}))
    http, grpc = free_port(), free_port()
    url = f"http://127.0.0.1:{http}"
    command = [sys.executable, "-m", "flowserve.cli", "serve", str(repo), "--device", args.device, "--http-port", str(http),
               "--grpc-port", str(grpc), "--log-level", "warning", *args.server_arg]
    server = start(command, url, timeout_s=300, log=workdir / "server.log")
    try:
        for name in models:
            for protocol in args.protocols:
                target = url if protocol == "http" else f"127.0.0.1:{grpc}"
                for concurrency in args.concurrencies:
                    before = server_compute(url, name)
                    try:
                        with GpuUtilisation() as gpu:
                            figures = load(target, name, concurrency, args.seconds, protocol, args.client_processes)
                    except Exception as exc:
                        emit(args, {"part": "server", "model": name, "protocol": protocol, "c": concurrency,
                                        "error": f"{type(exc).__name__}: {exc}"[:300]})
                        continue
                    after = server_compute(url, name)
                    executions = max(1, after["count"] - before["count"])
                    formed = (after["rows"] - before["rows"]) / executions
                    batch, engine = nearest_ceiling(ceilings[name], formed)
                    emit(args, {"part": "server", "model": name, "protocol": protocol, "c": concurrency,
                                    **figures, "formed_batch": formed, "gpu_util": gpu.mean,
                                    "engine_images_s_at_batch": engine, "engine_batch": batch,
                                    "server_over_engine": figures["images_s"] / engine})
    finally:
        stop(server)
        log = (workdir / "server.log").read_text()[-2000:]
        if log.strip():
            print("server log (end):", log, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet,resnet50")
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--concurrencies", default="1,32,128")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--instances", type=int, default=2, help="sessions (CUDA streams) per model")
    parser.add_argument("--client-processes", type=int, default=6)
    parser.add_argument("--no-server", action="store_true", help="the engine part only")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to try the script out")
    parser.add_argument("--out", default=None, help="append one JSON line per row here")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="an option for flowserve serve, e.g. --server-arg=--cudnn-benchmark (repeatable)")
    args = parser.parse_args()
    args.concurrencies = [int(c) for c in args.concurrencies.split(",")]
    args.protocols = args.protocols.split(",")
    args.rows = []  # every row printed, for the tables at the end
    if args.device == "cuda" and not cuda_usable():
        sys.exit(f"no CUDA GPU usable by onnxruntime here (providers {ort.get_available_providers()})")
    models = {name: MODELS[name]() for name in args.models.split(",")}
    ceilings = {}
    try:
        for name, model in models.items():
            ceilings[name] = engine_part(name, model, args)
        if not args.no_server:
            with tempfile.TemporaryDirectory(prefix="flowserve-gpu-") as tmp:
                server_part(models, ceilings, args, pathlib.Path(tmp))
    finally:
        print_tables(args.rows)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
