"""Serving figures, side by side in one run on loopback.

1. Server-added latency at concurrency 1 on an MLP 64-256-10 (round trip minus
   in-process ONNX Runtime): HTTP binary, HTTP JSON, gRPC, and the plain
   FastAPI + onnxruntime app with JSON. Both servers run at once and are
   measured in interleaved rounds (background load hits both alike) by the
   same client: a keep-alive raw-socket HTTP/1.1 connection sending a request
   encoded once (the JSON bytes are identical for both servers) and decoding
   every answer into numpy arrays. gRPC is called the same way twice: with an
   equally lean raw-socket HTTP/2 client (``RawGrpc`` in ``raw_clients.py``, the
   like-for-like figure against HTTP), and with grpcio's blocking stub (what
   tritonclient users run). The round trip of ``flowserve.clients`` (encoding numpy
   each call) is shown too, and the echo server (``echo_server.py``: canned answers,
   no work; its gRPC on ``grpc.aio``, as flowserve's), the floor of each protocol on
   this machine.

   A Python client costs a lot itself (grpcio's blocking stub ~200 µs of CPU per
   call, the raw HTTP client ~15), so each row also gives the CPU per call of the
   client (this process) and of the server (its process, all threads, from
   ``/proc/PID/task/*/schedstat``, less what it burns idle), and each front end's
   *share*: its round trip less the client side, which is the echo's round trip
   (same client, same protocol, same encoding) minus the echo server's own CPU.
   The client's cost leaves both protocols the same way, and grpcio's own server
   cost, which a gRPC front end on grpcio cannot avoid, stays in the share.
2. Throughput at concurrency 32 on that MLP vs the plain app, and the echo server's
   with the same client (the protocol's ceiling here), with CPU per request, in
   alternating rounds.
3. Throughput at concurrency 32 on mobilenet_v2 (224x224, 1000 classes) with
   batching vs in-process ONNX Runtime at the batch size the server formed and
   vs the plain app.

Every load is bounded in time (``--seconds`` each) and targets 127.0.0.1 only::

    python bench/bench_serving.py --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from flowserve.clients import GRPCClient, HTTPClient
from flowserve.clients.perf import run_load
from flowserve.onnx_backend.runtime import session_options
from busy import busy
from raw_clients import raw_grpc_call, raw_h2_grpc_call, raw_http_call

try:
    import uvloop
except ImportError:
    uvloop = None

HERE = pathlib.Path(__file__).resolve().parent


def mlp_model(sizes=(64, 256, 10)) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(
            np.float32), f"w{i}"), numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}")]
        out = "y" if i == len(sizes) - 2 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [out]))
        if out != "y":
            nodes.append(helper.make_node("Relu", [out], [out + "r"]))
            out += "r"
        prev = out
    return _model(nodes, inits, [sizes[0]], [sizes[-1]])


def _model(nodes, inits, in_dims, out_dims) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *in_dims])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", *out_dims])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


class _ConvBuilder:
    """Conv (batch norm folded into weights and bias) + ReLU6, random weights."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0
        self.rng = np.random.default_rng(0)

    def conv(self, x, cin, cout, k=1, stride=1, groups=1, relu6=True):
        self.count += 1
        name = f"c{self.count}"
        w = self.rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
        w *= np.sqrt(2.0 / (cin // groups * k * k)).astype(np.float32)
        self.inits += [numpy_helper.from_array(w, name + "_w"),
                       numpy_helper.from_array(np.zeros(cout, np.float32), name + "_b")]
        self.nodes.append(helper.make_node(
            "Conv", [x, name + "_w", name + "_b"], [name], kernel_shape=[k, k],
            strides=[stride, stride], pads=[k // 2] * 4, group=groups))
        if not relu6:
            return name
        self.nodes.append(helper.make_node("Clip", [name, "zero", "six"], [name + "_r"]))
        return name + "_r"


def mobilenet_v2_model() -> onnx.ModelProto:
    """MobileNetV2 (width 1.0, ImageNet head) with random weights."""
    b = _ConvBuilder()
    b.inits += [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                numpy_helper.from_array(np.array(6, np.float32), "six")]
    x, cin = b.conv("x", 3, 32, 3, 2), 32
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]
    for expand, cout, repeats, stride in settings:
        for i in range(repeats):
            s = stride if i == 0 else 1
            hidden = cin * expand
            h = b.conv(x, cin, hidden) if expand != 1 else x
            h = b.conv(h, hidden, hidden, 3, s, groups=hidden)
            h = b.conv(h, hidden, cout, relu6=False)
            if s == 1 and cin == cout:
                b.nodes.append(helper.make_node("Add", [x, h], [h + "_add"]))
                h += "_add"
            x, cin = h, cout
    x = b.conv(x, cin, 1280)
    b.nodes += [helper.make_node("GlobalAveragePool", [x], ["pool"]),
                helper.make_node("Flatten", ["pool"], ["flat"])]
    w = (b.rng.standard_normal((1280, 1000)) / np.sqrt(1280)).astype(np.float32)
    b.inits += [numpy_helper.from_array(w, "fc_w"),
                numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b")]
    b.nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"]))
    return _model(b.nodes, b.inits, [3, 224, 224], [1000])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(command: list[str], ready_url: str, timeout_s: float = 120,
          log: pathlib.Path = None) -> subprocess.Popen:
    """``command`` started (in a session of its own, which ``stop`` ends whole) and ready
    at ``ready_url``; its output goes to ``log`` when given (a chatty server would fill the
    pipe of stderr otherwise and stall)."""
    if log is None:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   start_new_session=True)
    else:
        with open(log, "wb") as output:
            process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                       start_new_session=True)
    client, deadline = HTTPClient(ready_url, timeout_s=5), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = log.read_text()[-4000:] if log is not None else process.stderr.read().decode()
            raise RuntimeError(text)
        try:
            if client.is_ready():
                return process
        except Exception:
            pass
        time.sleep(0.2)
    stop(process)
    raise TimeoutError(f"{command} not ready")


def stop(process: subprocess.Popen) -> None:
    """End ``process`` and what it started (its session): SIGTERM, then SIGKILL for
    whatever outlives it (the process itself after 30 s)."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def ort_latency_us(model: onnx.ModelProto, x: np.ndarray, seconds: float) -> float:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    times, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline and len(times) < 20000:
        started = time.perf_counter()
        session.run(None, {"x": x})
        times.append(time.perf_counter() - started)
    return float(np.median(times) * 1e6)


def ort_rows_per_s(model: onnx.ModelProto, batch: int, seconds: float,
                   options: ort.SessionOptions = None) -> float:
    session = ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                   providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    session.run(None, {"x": x})
    runs, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        session.run(None, {"x": x})
        runs += 1
    return runs * batch / (time.monotonic() - started)


def timed_calls(call, seconds: float, limit: int = 20000) -> list[float]:
    """Durations of back-to-back calls for ``seconds`` (at most ``limit``)."""
    times, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline and len(times) < limit:
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def process_cpu_ns(pid: int) -> int:
    """CPU time used so far by every thread of process ``pid`` (``/proc/PID/task/*/schedstat``,
    nanoseconds on the CPU), or 0 where the kernel does not expose it."""
    total = 0
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            pass
    return total


def interleaved_round_trips(calls: dict, seconds: float, rounds: int = 3,
                            pids: dict = None) -> dict:
    """``{name: Trips}`` of each call measured in alternating rounds (the order rotating from
    round to round): p50 and p99 round trip,
    and the CPU time per call of the client (this process, all its threads) and of the
    server (``pids[name]``, all its threads, less what it burns idle), in µs."""
    pids = pids or {}
    for call in calls.values():
        for _ in range(50):
            call()
    samples = {name: [] for name in calls}
    cpu = {name: [0, 0] for name in calls}  # client ns, server ns
    idle_ns = {pid: _idle_cpu_ns_per_s(pid) for pid in set(pids.values())}
    names = list(calls)
    for round_index in range(rounds):
        # each round starts one further along: in a fixed order a call's place in the round
        # showed in its figures (the same server read ~10% faster placed before its peer)
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            call, pid = calls[name], pids.get(name)
            server_before, client_before = process_cpu_ns(pid) if pid else 0, time.process_time_ns()
            started = time.monotonic()
            samples[name] += timed_calls(call, seconds / rounds)
            cpu[name][0] += time.process_time_ns() - client_before
            if pid:
                idle = idle_ns[pid] * (time.monotonic() - started)
                cpu[name][1] += max(0.0, process_cpu_ns(pid) - server_before - idle)
    return {name: Trips(float(np.percentile(t, 50) * 1e6), float(np.percentile(t, 99) * 1e6),
                        cpu[name][0] / len(t) / 1e3,
                        cpu[name][1] / len(t) / 1e3 if name in pids else float("nan"))
            for name, t in samples.items()}


def _idle_cpu_ns_per_s(pid: int, seconds: float = 0.5) -> float:
    """What process ``pid`` burns per second with no request (timers, pollers)."""
    before, started = process_cpu_ns(pid), time.monotonic()
    time.sleep(seconds)
    return (process_cpu_ns(pid) - before) / (time.monotonic() - started)


@dataclasses.dataclass
class Trips:
    """One call's figures at concurrency 1, µs: round-trip p50 and p99, CPU per call."""

    p50: float
    p99: float
    client_cpu: float
    server_cpu: float


def load(url, model, concurrency, seconds, protocol="http", binary=True, x=None):
    inputs = None if x is None else {"x": x}
    main = run_load(url, model, concurrency, seconds, protocol, binary, inputs=inputs,
                    warmup_s=0.5)
    report = uvloop.run(main) if uvloop is not None else asyncio.run(main)
    if report.errors:
        raise RuntimeError(report.first_error)
    return report


def write_repository_mlp(root: pathlib.Path, mlp) -> None:
    """A repository holding the MLP as model ``mlp`` (max batch 64)."""
    (root / "mlp" / "1").mkdir(parents=True)
    onnx.save(mlp, root / "mlp" / "1" / "model.onnx")
    (root / "mlp" / "config.json").write_text(json.dumps({"max_batch_size": 64}))


def write_repository(root: pathlib.Path, mlp, mobilenet) -> None:
    for name, model, config in (
        ("mlp", mlp, {"max_batch_size": 64}),
        ("mobilenet", mobilenet, {"max_batch_size": 32,
                                  "dynamic_batching": {"max_queue_delay_us": 5000,
                                                       "preferred_batch_size": [16]}}),
    ):
        (root / name / "1").mkdir(parents=True)
        onnx.save(model, root / name / "1" / "model.onnx")
        (root / name / "config.json").write_text(json.dumps(config))
    onnx.save(mlp, root.parent / "mlp.onnx")
    onnx.save(mobilenet, root.parent / "mobilenet.onnx")


def row(table, name, value, unit, note=""):
    table.append((name, value, unit, note))
    print(f"{name:<66} {value:>10,.1f} {unit:<6} {note}", flush=True)


# the echo row whose client-side time each front end's is taken to equal (same client,
# same protocol, same encoding of the request and decoding of the answer)
ECHO_OF = {"flowserve HTTP binary": "echo server HTTP binary",
           "flowserve HTTP JSON": "echo server HTTP JSON",
           "plain FastAPI+ORT JSON": "echo server HTTP JSON",
           "flowserve gRPC": "echo server gRPC",
           "flowserve gRPC raw HTTP/2": "echo server gRPC raw HTTP/2"}


def measure_latency(table, urls: dict, x1: np.ndarray, ort_us: float, seconds: float,
                    pids: dict) -> dict:
    """Per front end and the plain app, interleaved: server-added p50/p99 (round trip less
    in-process ORT), the client's and the server's CPU per call, and the server's share
    (round trip less the client side, that is less the echo's round trip minus the echo
    server's own CPU: what the client, the kernel and the wake-ups cost with this client)."""
    http_bin, http_json = HTTPClient(urls["http"]), HTTPClient(urls["http"], binary=False)
    grpc_end_to_end = GRPCClient(urls["grpc"])
    calls = {
        "flowserve HTTP binary": raw_http_call(urls["http"], "mlp", x1, binary=True),
        "flowserve HTTP JSON": raw_http_call(urls["http"], "mlp", x1, binary=False),
        "flowserve gRPC": raw_grpc_call(urls["grpc"], "mlp", x1),
        "flowserve gRPC raw HTTP/2": raw_h2_grpc_call(urls["grpc"], "mlp", x1),
        "plain FastAPI+ORT JSON": raw_http_call(urls["plain"], "m", x1, binary=False),
        "echo server HTTP binary": raw_http_call(urls["echo"], "mlp", x1, binary=True),
        "echo server HTTP JSON": raw_http_call(urls["echo"], "mlp", x1, binary=False),
        "echo server gRPC": raw_grpc_call(urls["echo_grpc"], "mlp", x1),
        "echo server gRPC raw HTTP/2": raw_h2_grpc_call(urls["echo_grpc"], "mlp", x1),
        "flowserve.clients HTTPClient binary": lambda: http_bin.infer("mlp", {"x": x1}),
        "flowserve.clients HTTPClient JSON": lambda: http_json.infer("mlp", {"x": x1}),
        "flowserve.clients GRPCClient": lambda: grpc_end_to_end.infer("mlp", {"x": x1}),
    }
    server_of = {"flowserve": pids["flowserve"], "plain": pids["plain"], "echo": pids["echo"]}
    call_pids = {name: pid for name in calls for key, pid in server_of.items()
                 if name.startswith(key)}
    trips = interleaved_round_trips(calls, min(seconds, 3) * len(calls), rounds=len(calls),
                                    pids=call_pids)
    latency = {}
    for name, trip in trips.items():
        latency[name] = trip.p50 - ort_us
        note = "numpy encoded per call" if name.startswith("flowserve.clients") else ""
        row(table, f"server-added latency c=1, {name}, p50", trip.p50 - ort_us, "us", note)
        row(table, f"server-added latency c=1, {name}, p99", trip.p99 - ort_us, "us", note)
        row(table, f"client CPU per call c=1, {name}", trip.client_cpu, "us", note)
        if name in call_pids:
            row(table, f"server CPU per call c=1, {name}", trip.server_cpu, "us")
    for name, echo in ECHO_OF.items():
        client_side = trips[echo].p50 - trips[echo].server_cpu
        latency[f"share {name}"] = share = trips[name].p50 - client_side
        latency[f"cpu {name}"] = trips[name].server_cpu
        row(table, f"server's share c=1, {name}, p50", share, "us",
            f"client side {client_side:.0f} us (from {echo})")
    for echo in set(ECHO_OF.values()):
        latency[f"cpu {echo}"] = trips[echo].server_cpu
    return latency


def measure_mlp_throughput(table, urls: dict, x1: np.ndarray, seconds: float,
                           pids: dict, rounds: int = 3) -> dict:
    """Requests/s at concurrency 32 of each front end, of the plain app and of the echo
    server (the most the protocol and this client reach here), with the server's and the
    client's CPU per request; ``rounds`` alternating rounds of ``seconds`` each (shorter
    loads read lower: each one opens its 32 connections and warms up anew)."""
    targets = (
        ("flowserve HTTP binary", "http", True, urls["http"], "mlp", "flowserve"),
        ("flowserve HTTP JSON", "http", False, urls["http"], "mlp", "flowserve"),
        ("flowserve gRPC", "grpc", True, urls["grpc"], "mlp", "flowserve"),
        ("plain FastAPI+ORT JSON", "http", False, urls["plain"], "m", "plain"),
        ("echo server HTTP binary", "http", True, urls["echo"], "mlp", "echo"),
        ("echo server gRPC", "grpc", True, urls["echo_grpc"], "mlp", "echo"),
    )
    totals = {name: [0, 0.0, 0, 0, []] for name, *_ in targets}  # requests, s, ns, ns, p99s
    for round_index in range(rounds):
        shift = round_index % len(targets)
        for name, protocol, binary, url, model, server in targets[shift:] + targets[:shift]:
            server_before, client_before = process_cpu_ns(pids[server]), time.process_time_ns()
            report = load(url, model, 32, seconds, protocol, binary, x1)
            total = totals[name]
            total[0] += report.requests
            total[1] += report.elapsed_s
            # CPU over the load and its half-second warm-up, per request of both
            warm = report.throughput * 0.5
            total[2] += (process_cpu_ns(pids[server]) - server_before) * report.requests / (
                report.requests + warm)
            total[3] += (time.process_time_ns() - client_before) * report.requests / (
                report.requests + warm)
            total[4].append(report.percentile_ms(99))
    throughput = {}
    for name, (requests, elapsed, server_ns, client_ns, p99s) in totals.items():
        throughput[name] = requests / elapsed
        row(table, f"MLP throughput c=32, {name}", throughput[name], "req/s",
            f"p99 {np.median(p99s):.2f} ms, CPU per request: server "
            f"{server_ns / requests / 1e3:.0f} us, client {client_ns / requests / 1e3:.0f} us")
    return throughput


def measure_mobilenet(table, urls: dict, image: np.ndarray, seconds: float) -> tuple:
    """flowserve's mobilenet_v2 throughput with batching and the batch size it formed."""
    report = load(urls["http"], "mobilenet", 32, seconds, "http", True, image)
    stats = HTTPClient(urls["http"]).statistics("mobilenet")["model_stats"][0]
    formed = stats["inference_count"] / max(1, stats["execution_count"])
    row(table, "mobilenet_v2 throughput c=32, flowserve HTTP binary", report.throughput,
        "req/s", f"avg batch formed {formed:.1f}")
    return report.throughput, formed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each load")
    parser.add_argument("--latency-only", action="store_true",
                        help="only the server-added latency at concurrency 1 (part 1)")
    parser.add_argument("--mobilenet-only", action="store_true",
                        help="only mobilenet_v2 at concurrency 32 vs in-process ORT (part 3), "
                        "in interleaved rounds")
    args = parser.parse_args()
    if args.mobilenet_only:
        mobilenet_only(args.seconds)
        return
    seconds, table = args.seconds, []
    mlp, mobilenet = mlp_model(), mobilenet_v2_model()
    x1 = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    image = np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "repo"
        write_repository(root, mlp, mobilenet)
        http_port, grpc_port, plain_port = free_port(), free_port(), free_port()
        echo_port, echo_grpc_port = free_port(), free_port()
        urls = {"http": f"http://127.0.0.1:{http_port}", "grpc": f"127.0.0.1:{grpc_port}",
                "plain": f"http://127.0.0.1:{plain_port}",
                "echo": f"http://127.0.0.1:{echo_port}",
                "echo_grpc": f"127.0.0.1:{echo_grpc_port}"}
        print(f"machine: {os.cpu_count()} cores, onnxruntime {ort.__version__}\n")
        print(f"{'figure':<66} {'value':>10} {'unit':<6} note")
        ort_us = ort_latency_us(mlp, x1, min(seconds, 3))
        row(table, "MLP 64-256-10 in-process ORT, batch 1, p50", ort_us, "us")
        plain_app = [sys.executable, str(HERE / "plain_fastapi_app.py")]
        commands = [
            ([sys.executable, "-m", "flowserve.server", str(root), "--http-port",
              str(http_port), "--grpc-port", str(grpc_port), "--log-level", "warning"],
             urls["http"]),
            (plain_app + [str(pathlib.Path(tmp) / "mlp.onnx"), str(plain_port)], urls["plain"]),
            ([sys.executable, str(HERE / "echo_server.py"), str(echo_port),
              str(echo_grpc_port)], urls["echo"]),
        ]
        servers = []
        try:
            for command, url in commands:  # each started one is stopped, whatever fails
                servers.append(start(command, url))
            pids = dict(zip(("flowserve", "plain", "echo"), (p.pid for p in servers)))
            latency = measure_latency(table, urls, x1, ort_us, seconds, pids)
            if args.latency_only:
                print_latency(latency)
                return
            mlp_tp = measure_mlp_throughput(table, urls, x1, seconds, pids)
            mobile_tp, formed = measure_mobilenet(table, urls, image, seconds)
        finally:
            for server in servers:
                stop(server)
        plain = start(plain_app + [str(pathlib.Path(tmp) / "mobilenet.onnx"), str(plain_port)],
                      urls["plain"])
        try:
            plain_mobile = load(urls["plain"], "m", 32, seconds, "http", False, image).throughput
            row(table, "mobilenet_v2 throughput c=32, plain FastAPI+ORT JSON", plain_mobile,
                "req/s")
        finally:
            stop(plain)
        batch = max(1, int(round(formed)))
        in_process = ort_rows_per_s(mobilenet, batch, seconds)
        row(table, f"mobilenet_v2 in-process ORT at batch {batch}", in_process, "img/s")
    print_ratios(latency, mlp_tp, mobile_tp, plain_mobile, in_process, batch)


def server_compute(url: str, model: str) -> dict:
    """The executions and nanoseconds of each compute phase the server reports."""
    stats = HTTPClient(url).statistics(model)["model_stats"][0]
    phases = {k: stats["inference_stats"][k]["ns"]
              for k in ("compute_input", "compute_infer", "compute_output")}
    return {"count": stats["execution_count"], "rows": stats["inference_count"], **phases}


BUSY_DUTY = 0.2  # measured at c=32: the event loop ~0.10 of a core, the load generator ~0.10


def mobilenet_only(seconds: float, rounds: int = 4) -> None:
    """flowserve at concurrency 32 and in-process ORT at the batch it formed, in alternating
    rounds; each round's ratio, and their median (background load hits a round's pair alike).
    The in-process peer runs three times: ONNX Runtime's defaults (spinning threads), the
    goal's peer; the server's own session options (threads that do not spin); and those
    beside a process busy ``BUSY_DUTY`` of one core, as the server's event loop and the load
    generator are beside ONNX Runtime's two threads in the server."""
    mobilenet = mobilenet_v2_model()
    image = np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype(np.float32)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "repo"
        write_repository(root, mlp_model(), mobilenet)
        http_port = free_port()
        url = f"http://127.0.0.1:{http_port}"
        server = start([sys.executable, "-m", "flowserve.server", str(root), "--http-port",
                        str(http_port), "--grpc-port", str(free_port()), "--log-level",
                        "warning"], url)
        try:
            for _ in range(rounds):
                ratios.append(mobilenet_round(url, mobilenet, image, seconds))
        finally:
            stop(server)
    print("\n  mobilenet_v2 flowserve / in-process ORT at the formed batch, per round: "
          + ", ".join(f"{r:.2f}" for r in ratios)
          + f"; median {np.median(ratios):.2f}  (>= 0.85), load average {os.getloadavg()[0]:.2f}")


def mobilenet_round(url: str, mobilenet, image: np.ndarray, seconds: float) -> float:
    """One round: the server's throughput and compute phases, then the in-process peers."""
    table, before = [], server_compute(url, "mobilenet")
    throughput, _ = measure_mobilenet(table, {"http": url}, image, seconds)
    phases = {k: v - before[k] for k, v in server_compute(url, "mobilenet").items()}
    executions = max(1, phases.pop("count"))
    batch = max(1, round(phases.pop("rows") / executions))
    print("    per batch in the server: " + ", ".join(
        f"{k} {v / executions / 1e6:.1f} ms" for k, v in phases.items()), flush=True)
    in_process = ort_rows_per_s(mobilenet, batch, seconds)
    row(table, f"mobilenet_v2 in-process ORT at batch {batch}", in_process, "img/s",
        f"{batch / in_process * 1e3:.1f} ms per batch")
    server_options = ort_rows_per_s(mobilenet, batch, seconds, session_options())
    row(table, f"mobilenet_v2 in-process ORT at batch {batch}, server's options",
        server_options, "img/s", f"{batch / server_options * 1e3:.1f} ms per batch")
    with busy(BUSY_DUTY):  # what a server's loop and a client on the same cores take
        crowded = ort_rows_per_s(mobilenet, batch, seconds, session_options())
    row(table, f"  the same, beside a process busy {BUSY_DUTY:.0%} of one core", crowded,
        "img/s", f"{batch / crowded * 1e3:.1f} ms per batch")
    return throughput / in_process


def print_latency(latency) -> None:
    binary = latency["flowserve HTTP binary"]
    print(f"\nratios (goal in brackets), load average {os.getloadavg()[0]:.2f}")
    print("  server-added p50 (binary <= 250 us, JSON <= 300 us): " + ", ".join(
        f"{name.removeprefix('flowserve ')} {latency[name]:.0f} us" for name in
        ("flowserve HTTP binary", "flowserve HTTP JSON", "flowserve gRPC",
         "plain FastAPI+ORT JSON")))
    print(f"  gRPC / HTTP binary, both with a raw-socket client: "
          f"{latency['flowserve gRPC raw HTTP/2'] / binary:.2f}x  (<= 1.2x); with grpcio's "
          f"stub: {latency['flowserve gRPC'] / binary:.2f}x; "
          f"plain app / HTTP binary: {latency['plain FastAPI+ORT JSON'] / binary:.2f}x")
    echo_http, echo_grpc = latency["echo server HTTP binary"], latency["echo server gRPC"]
    print(f"  over the echo server (flowserve's own cost): HTTP binary "
          f"{binary - echo_http:.0f} us, gRPC {latency['flowserve gRPC'] - echo_grpc:.0f} us; "
          f"echo gRPC / echo HTTP: {echo_grpc / echo_http:.2f}x")
    shares = {name: latency[f"share {name}"] for name in ECHO_OF}
    print("  server's share p50, the client's side removed: " + ", ".join(
        f"{name.removeprefix('flowserve ')} {value:.0f} us" for name, value in shares.items())
        + "; gRPC / HTTP binary: raw clients "
        f"{shares['flowserve gRPC raw HTTP/2'] / shares['flowserve HTTP binary']:.2f}x  (<= 1.2x), "
        f"grpcio stub {shares['flowserve gRPC'] / shares['flowserve HTTP binary']:.2f}x")
    print("  server CPU per call: " + ", ".join(
        f"{name.removeprefix('flowserve ')} {latency['cpu ' + name]:.0f} us"
        for name in (*ECHO_OF, *sorted(set(ECHO_OF.values())))))


def print_ratios(latency, mlp_tp, mobile_tp, plain_mobile, in_process, batch) -> None:
    plain = mlp_tp["plain FastAPI+ORT JSON"]
    print_latency(latency)
    print(f"  MLP c=32 flowserve HTTP binary / plain app: "
          f"{mlp_tp['flowserve HTTP binary'] / plain:.2f}x  (>= 2x); "
          f"JSON / plain: {mlp_tp['flowserve HTTP JSON'] / plain:.2f}x; "
          f"gRPC / plain: {mlp_tp['flowserve gRPC'] / plain:.2f}x")
    print(f"  MLP c=32 echo server / plain app (the protocol's ceiling with this client): "
          f"HTTP binary {mlp_tp['echo server HTTP binary'] / plain:.2f}x, "
          f"gRPC {mlp_tp['echo server gRPC'] / plain:.2f}x; flowserve / echo: HTTP binary "
          f"{mlp_tp['flowserve HTTP binary'] / mlp_tp['echo server HTTP binary']:.2f}, "
          f"gRPC {mlp_tp['flowserve gRPC'] / mlp_tp['echo server gRPC']:.2f}")
    print(f"  mobilenet_v2 flowserve / in-process ORT at batch {batch}: "
          f"{mobile_tp / in_process:.2f}  (>= 0.85)")
    print(f"  mobilenet_v2 flowserve / plain app: {mobile_tp / plain_mobile:.2f}x  (>= 1.5x)")


if __name__ == "__main__":
    main()
