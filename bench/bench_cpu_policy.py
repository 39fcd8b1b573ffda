"""flowserve's CPU policies on a compute-bound model, against Triton, in one run.

MobileNetV2-224 (random weights, max batch 32, 500 µs queue delay, as ``bench_peers.py``)
served by flowserve under its default policy (``auto``, which picks ``wide-narrow`` for
this model: one session on every core for a lone request, one single-threaded session per
core under load), under the two fixed layouts it replaces (one session of every core's
threads; one single-threaded session per core), and by Triton through PyTriton (one
onnxruntime session, Triton's dynamic batcher). Triton's ``perf_analyzer`` drives each
over HTTP (binary tensors) and gRPC at concurrency 1, 8 and 32, batch 1. One server runs
at a time; each round goes over the servers in turn, every other round in reverse order,
and the table gives medians over rounds (images/s), the load average beside each round,
and the ratios of the default to the others. Before timing, every server's answer to one
image is checked against onnxruntime in process::

    python bench/bench_cpu_policy.py --cudart-dir /tmp/cudart/nvidia/cuda_runtime/lib \\
        --pytriton-python /tmp/venv-pytriton/bin/python --rounds 3
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

from bench_peers import LONG_WINDOW_MS, flowserve_command, pytriton_command
from bench_perf_analyzer import perf_analyzer
from bench_serving import free_port, mobilenet_v2_model, start, stop
from flowserve.clients import HTTPClient

PROTOCOLS = ("http", "grpc")
CONCURRENCIES = (1, 8, 32)
DEFAULT = "flowserve default (wide-narrow)"


def layouts(cores: int, pytriton_python: str) -> dict:
    """Server name -> (python, command builder, extra flowserve options)."""
    python = sys.executable
    servers = {
        DEFAULT: (python, flowserve_command, []),
        f"flowserve 1 session x {cores} threads": (python, flowserve_command, ["--instances", "1"]),
        f"flowserve {cores} sessions x 1 thread": (
            python, flowserve_command, ["--instances", str(cores), "--intra-op-threads", "1"]),
    }
    if pytriton_python and os.path.exists(pytriton_python):
        servers["triton (pytriton)"] = (pytriton_python, pytriton_command, [])
    else:
        print(f"triton left out: no {pytriton_python}", flush=True)
    return servers


def check_answer(http_url: str, model_path: pathlib.Path, name: str) -> None:
    """Wait for the model (PyTriton's server is ready before its models), then compare one
    answer with onnxruntime's in process."""
    client, deadline = HTTPClient(http_url), time.monotonic() + 120
    while not client.is_model_ready("mobilenet"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: model mobilenet not ready after 120 s")
        time.sleep(0.5)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: x})[0]
    (answer,) = client.infer("mobilenet", {session.get_inputs()[0].name: x}).values()
    np.testing.assert_allclose(answer, expected, rtol=1e-4, atol=1e-4, err_msg=name)
    sessions = client.model_metadata("mobilenet").get("parameters", {}).get("sessions")
    if sessions:
        print(f"{name}: sessions {sessions}", flush=True)


def measure(name, spec, models, workdir, env, interval_ms, protocols=PROTOCOLS) -> dict:
    """(protocol, concurrency) -> images/s of one server, started and stopped here."""
    python, command, extra = spec
    http, grpc = free_port(), free_port()
    argv = [*command(python, models, http, grpc, workdir), *extra]
    process = start(argv, f"http://127.0.0.1:{http}", log=workdir / f"{http}.log")
    figures = {}
    try:
        check_answer(f"http://127.0.0.1:{http}", models["mobilenet"], name)
        for protocol in protocols:
            url = f"127.0.0.1:{http if protocol == 'http' else grpc}"
            for concurrency in CONCURRENCIES:
                # at concurrency 32 an answer takes about as long as a short window (bench_peers.py)
                window_ms = max(interval_ms, LONG_WINDOW_MS) if concurrency == 32 else interval_ms
                try:
                    result = perf_analyzer(url, protocol, concurrency, window_ms, env, model="mobilenet")
                except RuntimeError as exc:
                    print(f"{name} {protocol} c={concurrency}: {str(exc)[-300:]}", flush=True)
                    continue
                figures[(protocol, concurrency)] = result["throughput"]
    finally:
        stop(process)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cudart-dir", help="folder holding libcudart.so.12 (perf_analyzer)")
    parser.add_argument("--pytriton-python", default="/tmp/venv-pytriton/bin/python")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="comma-separated: http, grpc")
    args = parser.parse_args()
    if shutil.which("perf_analyzer") is None:
        sys.exit("perf_analyzer not found: pip install 'tritonclient[all]'")
    env = dict(os.environ)
    if args.cudart_dir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (args.cudart_dir, env.get("LD_LIBRARY_PATH")) if p)
    cores = os.cpu_count() or 1
    servers = layouts(cores, args.pytriton_python)
    results = {name: {} for name in servers}
    with tempfile.TemporaryDirectory() as folder:
        workdir = pathlib.Path(folder)
        models = {"mobilenet": workdir / "mobilenet.onnx"}
        onnx.save(mobilenet_v2_model(), models["mobilenet"])
        for round_ in range(args.rounds):
            order = list(servers) if round_ % 2 == 0 else list(servers)[::-1]
            for name in order:
                before = os.getloadavg()[0]
                run_dir = workdir / f"round{round_}-server{list(servers).index(name)}"
                run_dir.mkdir()
                figures = measure(name, servers[name], models, run_dir, env, args.interval_ms,
                                  tuple(args.protocols.split(",")))
                for key, value in figures.items():
                    results[name].setdefault(key, []).append(value)
                row = ", ".join(f"{p} c={c} {v:.1f}" for (p, c), v in figures.items())
                print(f"round {round_ + 1} {name}: {row} (load {before:.1f} -> {os.getloadavg()[0]:.1f})",
                      flush=True)
    report(results)


def report(results: dict) -> None:
    medians = {name: {key: statistics.median(values) for key, values in rows.items()}
               for name, rows in results.items()}
    columns = [(p, c) for p in PROTOCOLS for c in CONCURRENCIES]
    print("\n| server | " + " | ".join(f"{p} c={c}" for p, c in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, row in medians.items():
        print(f"| {name} | " + " | ".join(f"{row[k]:.1f}" if k in row else "—" for k in columns) + " |")
    for name, row in medians.items():
        if name == DEFAULT:
            continue
        ratios = [f"{medians[DEFAULT][k] / row[k]:.2f}x" if k in row and k in medians[DEFAULT] else "—"
                  for k in columns]
        print(f"| default ÷ {name} | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
