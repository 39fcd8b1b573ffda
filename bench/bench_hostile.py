"""Hostile probes against ``flowserve serve``: server RSS growth and health latency.

Starts the server (``python -m flowserve.server``, whichever flowserve this Python
imports) on a repository of small models, then, one probe at a time: a 60 MB JSON body of
numbers, a 60 MB binary BYTES body of 12M one-byte elements, a heavy request to an idle single-instance model, and 20 connections sending
oversized request heads. For each: the server's RSS before, its peak (VmHWM is reset
before each probe) and after, the probe's status, and /v2/health/live latencies measured
meanwhile (median and max). With ``--grpc``, the gRPC attacks of issues 25 and 46 instead
(``hostile_grpc.py``: floods, gzip bombs from one and four connections, half-sent 60 MiB
messages from 100 streams of one connection, 10 and 100 connections), each on flowserve
and on a bare ``grpc.aio`` server in the same run.
Bounded in time; 127.0.0.1 only::

    python bench/bench_hostile.py
    python bench/bench_hostile.py --grpc --seconds 3
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET, IR_VERSION = 21, 10


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)


def write_repository(root: pathlib.Path) -> None:
    width = 512
    weight = numpy_helper.from_array((np.eye(width) / 1.5).astype(np.float32), "w")
    heavy = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", "w"], [f"h{i}"])
             for i in range(6)] + [helper.make_node("ReduceSum", ["h5"], ["y"], keepdims=0)]
    models = {
        "sum": _model([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", "cols"])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])]),
        "text": _model([helper.make_node("Identity", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.STRING, ["n"])],
                       [helper.make_tensor_value_info("y", TensorProto.STRING, ["n"])]),
        "heavy": _model(heavy, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              ["rows", width])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [weight]),
    }
    for name, model in models.items():
        (root / name / "1").mkdir(parents=True)
        onnx.save(model, root / name / "1" / "model.onnx")
        (root / name / "config.json").write_text('{"max_batch_size": 0}')


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MB."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as handle:
        handle.write("5")  # resets VmHWM to the current RSS


def probe_health(url: str, stop: threading.Event, latencies: list) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        while not latencies or not stop.is_set():  # at least one probe, however short
            started = time.perf_counter()
            client.get("/v2/health/live")
            latencies.append(time.perf_counter() - started)
            time.sleep(0.02)


def json_numbers() -> tuple[bytes, dict]:
    rows = 60 * 2**20 // (4 * 1000)
    data = b",".join([b"0.5"] * (rows * 1000))
    body = (b'{"inputs":[{"name":"x","datatype":"FP32","shape":[%d,1000],"data":[' % rows
            + data + b"]}]}")
    return body, {}


def binary_bytes() -> tuple[bytes, dict]:
    count = 12_000_000
    blob = (b"\x01\x00\x00\x00a") * count
    header = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [count],
                                     "parameters": {"binary_data_size": len(blob)}}]}).encode()
    return header + blob, {"Inference-Header-Content-Length": str(len(header))}


def heavy() -> tuple[bytes, dict]:
    x = np.ones((16_384, 512), np.float32)
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                     "parameters": {"binary_data_size": x.nbytes}}]}).encode()
    return header + x.tobytes(), {"Inference-Header-Content-Length": str(len(header))}


def post(url: str, model: str, body_and_headers) -> str:
    body, headers = body_and_headers
    try:
        answer = httpx.post(f"{url}/v2/models/{model}/infer", content=body, headers=headers,
                            timeout=120)
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return f"{answer.status_code} {answer.text[:60]!r}"


def oversized_heads(port: int, connections: int = 20, size: int = 8 * 2**20) -> str:
    def one(replies):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            try:
                sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
                chunk = b"X-Filler: " + b"a" * 65_000 + b"\r\n"
                for _ in range(size // len(chunk)):
                    sock.sendall(chunk)
                sock.settimeout(2)
                replies.append(sock.recv(200)[:12].decode(errors="replace") or "closed")
            except OSError as exc:
                replies.append(type(exc).__name__)

    replies: list = []
    threads = [threading.Thread(target=one, args=(replies,)) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return ", ".join(sorted(set(replies)))


def grpc_main(seconds: float, server_args: list, only: str) -> None:
    import hostile_grpc
    from bench_serving import free_port

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "repo"
        write_repository(root)
        hostile_grpc.write_wide(root)
        port, grpc_port = free_port(), free_port()
        server = subprocess.Popen([sys.executable, "-m", "flowserve.server", str(root),
                                   "--http-port", str(port), "--grpc-port", str(grpc_port),
                                   "--log-level", "error", *server_args],
                                  stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            print(f"load average: {open('/proc/loadavg').read().split()[:3]}")
            hostile_grpc.run(server.pid, f"127.0.0.1:{grpc_port}", seconds, free_port, only)
        finally:
            server.terminate()
            server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grpc", action="store_true", help="the gRPC attacks instead")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each gRPC attack")
    parser.add_argument("--server-args", default="", help="more flags for flowserve serve, "
                        "e.g. '--grpc-receive-window-bytes 1048576' (with --grpc)")
    parser.add_argument("--only", default="", help="the gRPC attacks whose name holds this")
    args = parser.parse_args()
    if args.grpc:
        return grpc_main(args.seconds, args.server_args.split(), args.only)
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "repo"
        write_repository(root)
        port = 18000 + os.getpid() % 1000
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([sys.executable, "-m", "flowserve.server", str(root),
                                   "--http-port", str(port), "--no-grpc",
                                   "--log-level", "error", *server_args],
                                  stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            light = np.ones((1, 512), np.float32)
            for _ in range(60):  # the heavy model looks cheap, as after light traffic
                post(url, "heavy", (json.dumps({"inputs": [{"name": "x", "datatype": "FP32",
                     "shape": [1, 512], "data": light.ravel().tolist()}]}).encode(), {}))
            bodies = {"json": json_numbers(), "bytes": binary_bytes(), "heavy": heavy()}
            probes = [  # bodies are built first: the client's own work must not be timed
                ("60 MB JSON numbers", lambda: post(url, "sum", bodies["json"])),
                ("60 MB binary BYTES, 12M elements", lambda: post(url, "text", bodies["bytes"])),
                ("heavy request, idle model", lambda: post(url, "heavy", bodies["heavy"])),
                ("20 x 8 MB request heads", lambda: oversized_heads(port))]
            print(f"load average: {open('/proc/loadavg').read().split()[:3]}")
            print(f"{'probe':<36} {'RSS before':>10} {'peak':>8} {'after':>8} "
                  f"{'health p50':>11} {'max':>8}  status")
            for name, probe in probes:
                reset_peak(server.pid)
                before, _ = rss_mb(server.pid)
                stop, latencies = threading.Event(), []
                prober = threading.Thread(target=probe_health, args=(url, stop, latencies))
                prober.start()
                status = probe()
                stop.set()
                prober.join(120)
                after, peak = rss_mb(server.pid)
                print(f"{name:<36} {before:>8.0f}MB {peak:>6.0f}MB {after:>6.0f}MB "
                      f"{statistics.median(latencies) * 1e3:>9.1f}ms "
                      f"{max(latencies) * 1e3:>6.0f}ms  {status}")
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
