"""``flowserve demo``: the whole path in one command.

Train a small classifier in graph mode, save it, export ONNX, serve it on loopback,
query it through the HTTP client, print predictions and latency, and stop the server.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import typer

import flowserve as flow


def make_blobs(n: int, features: int = 16, classes: int = 3, seed: int = 0):
    """Gaussian clusters, one per class (the same centers for every seed): a dataset that
    needs no download; ``seed`` draws the points."""
    centers = np.random.default_rng(1234).normal(0, 0.6, (classes, features)).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    points = centers[labels] + rng.normal(0, 1.0, (n, features)).astype(np.float32)
    return points, labels.astype(np.int64)


def train(steps: int, log=print):

    flow.manual_seed(0)
    x, y = make_blobs(512)
    model = flow.nn.Sequential(flow.nn.Linear(16, 64), flow.nn.ReLU(), flow.nn.Linear(64, 3))
    loss_fn = flow.nn.CrossEntropyLoss()
    optimizer = flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    class TrainGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = loss_fn
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    graph = TrainGraph()
    xs, ys = flow.tensor(x), flow.tensor(y)
    for step in range(steps):
        loss = graph(xs, ys)
        if step % max(steps // 5, 1) == 0 or step == steps - 1:
            log(f"  step {step:4d}  loss {loss.item():.4f}")
    return graph, model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(path: Path, port: int, name: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "flowserve.cli", "serve", str(path), "--host", "127.0.0.1",
           "--http-port", str(port), "--no-grpc", "--model-name", name, "--log-level", "warning"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_ready(client, server: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited early:\n{server.stderr.read()}")
        try:
            if client.is_ready():
                return
        except Exception:  # not listening yet
            pass
        time.sleep(0.1)
    raise TimeoutError(f"the server was not ready within {timeout_s:.0f} s")


def query(client, name: str, requests: int, log=print) -> np.ndarray:
    x, y = make_blobs(requests, seed=1)
    latencies, correct = [], 0
    for i in range(requests):
        start = time.perf_counter()
        logits = client.infer(name, {"x": x[i:i + 1]})["output_0"]
        latencies.append(time.perf_counter() - start)
        correct += int(logits.argmax() == y[i])
        if i < 5:
            log(f"  request {i}: predicted class {int(logits.argmax())}, label {y[i]}")
    ms = np.array(latencies) * 1e3
    log(f"  {requests} requests: accuracy {correct / requests:.2%}, latency p50 {np.percentile(ms, 50):.2f} ms, "
        f"p99 {np.percentile(ms, 99):.2f} ms")
    return ms


def demo(
    steps: int = typer.Option(200, help="Training steps in graph mode."),
    requests: int = typer.Option(200, help="Requests sent to the server."),
    workdir: str = typer.Option("", help="Where to write the saved graph and model.onnx (default: a temp dir)."),
) -> None:
    """Train in graph mode, save, export ONNX, serve on loopback, query, and stop."""
    from flowserve.clients import HTTPClient  # local: demo drives the client stack
    from flowserve.exporter import export  # local: exporter sits above the core

    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="flowserve-demo-"))
    typer.echo(f"1. training a 16-64-3 classifier in graph mode ({steps} steps)")
    graph, _ = train(steps, typer.echo)
    saved = root / "classifier"
    typer.echo(f"2. flow.save(graph, {saved})")
    flow.save(graph, saved)
    onnx_path = root / "classifier.onnx"
    result = export(saved, onnx_path, target="onnxruntime")
    typer.echo(f"3. exported {onnx_path} ({len(result.model.graph.node)} ONNX nodes)")
    port = free_port()
    typer.echo(f"4. flowserve serve {saved} on http://127.0.0.1:{port}")
    server = start_server(saved, port, "classifier")
    try:
        with HTTPClient(f"http://127.0.0.1:{port}") as client:
            wait_ready(client, server)
            typer.echo("5. querying through flowserve.clients.HTTPClient")
            query(client, "classifier", requests, typer.echo)
    finally:
        server.terminate()
        server.wait(timeout=30)
    typer.echo("6. server stopped")
    if not workdir:
        shutil.rmtree(root, ignore_errors=True)
