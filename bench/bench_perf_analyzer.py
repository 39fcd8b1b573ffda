"""Triton's perf_analyzer against flowserve and the echo server, side by side.

The MLP 64-256-10 of ``bench_serving.py``, batch 1, over HTTP and gRPC at
concurrency 1 and 8; each measurement runs flowserve then the echo server
(``echo_server.py``: the protocol's floor on this machine; over HTTP both the bare
echo and the same echo behind uvicorn, flowserve's HTTP stack; over gRPC a ``grpc.aio``
echo, the stack flowserve's gRPC runs on) back to back, and
the table gives the throughput ratios (goal: flowserve >= 0.7x the echo server).

``--shared-memory`` measures instead what Triton's system shared-memory extension saves:
flowserve (``--allow-client-shm``) with the tensors in the request and answer bodies
against the same runs with perf_analyzer's ``--shared-memory system``, alternating, on the
MLP and on an image-sized input (3x224x224 FP32, 588 KiB, averaged to one number by the
model so that moving the tensor is most of the work).

perf_analyzer ships with ``tritonclient[all]``; its binary links ``libb64`` (Debian:
``libb64-0d``) and the CUDA runtime even on CPU-only machines: point ``--cudart-dir``
at a folder with ``libcudart.so.12`` (for example the ``nvidia-cuda-runtime-cu12``
wheel unpacked) when the system has none::

    python bench/bench_perf_analyzer.py --cudart-dir /tmp/cudart/nvidia/cuda_runtime/lib
    python bench/bench_perf_analyzer.py --shared-memory --cudart-dir ...
    python bench/bench_perf_analyzer.py --receive-windows 65536,4194304 --cudart-dir ...

``--receive-windows`` runs one flowserve per ``--grpc-receive-window-bytes`` value and
drives them in turn over gRPC (image-sized input and MLP, concurrency 1 and 8), several
rounds alternating their order: medians and ranges.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper

from bench_serving import free_port, mlp_model, start, stop, write_repository_mlp

HERE = pathlib.Path(__file__).resolve().parent


def perf_analyzer(url: str, protocol: str, concurrency: int, interval_ms: int,
                  env: dict, model: str = "mlp", extra: tuple = (), max_trials: int = 3) -> dict:
    """perf_analyzer's figures for one run: infer/s, p50 and p99 latency in µs."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as report:
        command = ["perf_analyzer", "-m", model, "-u", url, "-i", protocol, "-b", "1",
                   "--concurrency-range", str(concurrency), "--measurement-interval",
                   str(interval_ms), "--max-trials", str(max_trials), "--stability-percentage", "999",
                   "--percentile", "50", "-f", report.name, *extra]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"perf_analyzer failed:\n{done.stdout[-2000:]}{done.stderr}")
        row = next(csv.DictReader(io.StringIO(pathlib.Path(report.name).read_text())))
    return {"throughput": float(row["Inferences/Second"]),
            "p50_us": float(row["p50 latency"]), "p99_us": float(row["p99 latency"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cudart-dir", help="folder holding libcudart.so.12")
    parser.add_argument("--interval-ms", type=int, default=2000,
                        help="perf_analyzer's measurement window")
    parser.add_argument("--shared-memory", action="store_true",
                        help="compare tensors in the bodies with tensors in system shared memory")
    parser.add_argument("--receive-windows", help="comma-separated --grpc-receive-window-bytes "
                        "values to compare over gRPC, e.g. 65536,4194304")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of --receive-windows")
    args = parser.parse_args()
    if shutil.which("perf_analyzer") is None:
        sys.exit("perf_analyzer not found: pip install 'tritonclient[all]'")
    env = dict(os.environ)
    if args.cudart_dir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (args.cudart_dir, env.get("LD_LIBRARY_PATH")) if p)
    if args.shared_memory:
        return shared_memory_comparison(args.interval_ms, env)
    if args.receive_windows:
        windows = [int(value) for value in args.receive_windows.split(",")]
        return receive_window_comparison(windows, args.rounds, args.interval_ms, env)
    ports = {name: free_port() for name in ("http", "grpc", "echo", "echo_grpc",
                                            "uvicorn_echo", "uvicorn_echo_grpc")}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "repo"
        write_repository_mlp(root, mlp_model())
        commands = [
            ([sys.executable, "-m", "flowserve.server", str(root), "--http-port",
              str(ports["http"]), "--grpc-port", str(ports["grpc"]), "--log-level", "warning"],
             f"http://127.0.0.1:{ports['http']}"),
            ([sys.executable, str(HERE / "echo_server.py"), str(ports["echo"]),
              str(ports["echo_grpc"])], f"http://127.0.0.1:{ports['echo']}"),
            ([sys.executable, str(HERE / "echo_server.py"), str(ports["uvicorn_echo"]),
              str(ports["uvicorn_echo_grpc"]), "uvicorn"],
             f"http://127.0.0.1:{ports['uvicorn_echo']}"),
        ]
        servers = []
        try:
            for command, url in commands:  # each started one is stopped, whatever fails
                servers.append(start(command, url))
            print(f"{'run':<34} {'infer/s':>9} {'p50 us':>8} {'p99 us':>8}", flush=True)
            for protocol in ("http", "grpc"):
                for concurrency in (1, 8):
                    for target in TARGETS[protocol]:
                        port = _port(ports, target, protocol)
                        figures = perf_analyzer(f"127.0.0.1:{port}", protocol, concurrency,
                                                args.interval_ms, env)
                        results[(protocol, concurrency, target)] = figures
                        print(f"{target + ' ' + protocol + f' c={concurrency}':<34} "
                              f"{figures['throughput']:>9,.0f} {figures['p50_us']:>8,.0f} "
                              f"{figures['p99_us']:>8,.0f}", flush=True)
        finally:
            for server in servers:
                stop(server)
    print(f"\nflowserve / echo server throughput (goal >= 0.7), "
          f"load average {os.getloadavg()[0]:.2f}")
    for protocol in ("http", "grpc"):
        for concurrency in (1, 8):
            ours = results[(protocol, concurrency, "flowserve")]["throughput"]
            print(f"  {protocol} c={concurrency}: " + ", ".join(
                f"/ {target} {ours / results[(protocol, concurrency, target)]['throughput']:.2f}"
                for target in TARGETS[protocol][1:]))


def image_mean_model() -> onnx.ModelProto:
    """x [batch, 3, 224, 224] FP32 -> y [batch, 1]: its mean (moving x is the work)."""
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["flat"]),
         helper.make_node("ReduceMean", ["flat"], ["y"], axes=[1], keepdims=1)], "image_mean",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def shared_memory_comparison(interval_ms: int, env: dict, rounds: int = 2) -> None:
    """Each model and protocol at concurrency 1, tensors in the bodies then in system shared
    memory, alternating ``rounds`` times; the best run of each."""
    ports = {"http": free_port(), "grpc": free_port()}
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "repo"
        write_repository_both(root)
        server = start([sys.executable, "-m", "flowserve.server", str(root), "--http-port",
                        str(ports["http"]), "--grpc-port", str(ports["grpc"]), "--log-level",
                        "warning", "--allow-client-shm"], f"http://127.0.0.1:{ports['http']}")
        modes = {"body": (), "shared memory": ("--shared-memory", "system",
                                                "--output-shared-memory-size", "4096")}
        best = {}
        try:
            for _ in range(rounds):
                for model in ("mlp", "image_mean"):
                    for protocol in ("http", "grpc"):
                        for mode, extra in modes.items():
                            figures = perf_analyzer(f"127.0.0.1:{ports[protocol]}", protocol, 1,
                                                    interval_ms, env, model, extra)
                            key = (model, protocol, mode)
                            if figures["throughput"] > best.get(key, {"throughput": 0})["throughput"]:
                                best[key] = figures
        finally:
            stop(server)
    print(f"{'model':<12}{'protocol':<10}{'tensors in':<15}{'infer/s':>9}{'p50 us':>9}{'p99 us':>9}"
          f"{'shm / body':>12}")
    for model in ("mlp", "image_mean"):
        for protocol in ("http", "grpc"):
            body = best[(model, protocol, "body")]["throughput"]
            for mode in modes:
                f = best[(model, protocol, mode)]
                ratio = f"{f['throughput'] / body:.2f}x" if mode != "body" else ""
                print(f"{model:<12}{protocol:<10}{mode:<15}{f['throughput']:>9,.0f}{f['p50_us']:>9,.0f}"
                      f"{f['p99_us']:>9,.0f}{ratio:>12}")
    print(f"# load average {os.getloadavg()[0]:.2f}")


def write_repository_both(root: pathlib.Path) -> None:
    """The MLP and the image-sized ``image_mean`` model in one repository."""
    write_repository_mlp(root, mlp_model())
    (root / "image_mean" / "1").mkdir(parents=True)
    onnx.save(image_mean_model(), root / "image_mean" / "1" / "model.onnx")


def receive_window_comparison(windows: list, rounds: int, interval_ms: int, env: dict) -> None:
    """One flowserve per receive window, all running; each row measured on each in turn,
    the order reversed every other round; median [min-max] infer/s per row and window."""
    rows = [("image_mean", 8), ("image_mean", 1), ("mlp", 8), ("mlp", 1)]
    figures: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "repo"
        write_repository_both(root)
        servers, ports = [], {}
        try:
            for window in windows:
                http, ports[window] = free_port(), free_port()
                servers.append(start([sys.executable, "-m", "flowserve.server", str(root),
                                      "--http-port", str(http), "--grpc-port", str(ports[window]),
                                      "--log-level", "warning", "--grpc-receive-window-bytes",
                                      str(window)], f"http://127.0.0.1:{http}"))
            for round_ in range(rounds):
                for model, concurrency in rows:
                    for window in windows if round_ % 2 == 0 else windows[::-1]:
                        got = perf_analyzer(f"127.0.0.1:{ports[window]}", "grpc", concurrency,
                                            interval_ms, env, model)
                        figures.setdefault((model, concurrency, window), []).append(got["throughput"])
        finally:
            for server in servers:
                stop(server)
    print(f"{'model':<12}{'c':>3}{'window':>10}{'infer/s':>9}  range ({rounds} rounds, "
          f"load average {os.getloadavg()[0]:.2f})")
    for (model, concurrency, window), values in figures.items():
        print(f"{model:<12}{concurrency:>3}{window:>10}{statistics.median(values):>9,.0f}  "
              f"{min(values):,.0f}-{max(values):,.0f}")


# HTTP: the bare httptools echo and the same echo behind uvicorn (flowserve's HTTP stack);
# gRPC: a grpc.aio echo (flowserve's gRPC stack, grpcio's server)
TARGETS = {"http": ("flowserve", "echo", "uvicorn echo"),
           "grpc": ("flowserve", "grpc.aio echo")}
PORT_OF = {("http", "echo"): "echo", ("http", "uvicorn echo"): "uvicorn_echo",
           ("grpc", "grpc.aio echo"): "echo_grpc"}


def _port(ports: dict, target: str, protocol: str) -> int:
    return ports[protocol if target == "flowserve" else PORT_OF[(protocol, target)]]


if __name__ == "__main__":
    main()
