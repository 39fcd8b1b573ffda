"""Walking-skeleton figures: eager vs graph training step of a 784-512-512-10 MLP (batch 256),
and the server's loopback round trip for that model at concurrency 1.

    python bench/bench_skeleton.py [--steps 30] [--requests 300]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import flowserve as flow
from flowserve.demo import free_port, wait_ready


def mlp():
    return flow.nn.Sequential(flow.nn.Linear(784, 512), flow.nn.ReLU(), flow.nn.Linear(512, 512), flow.nn.ReLU(),
                              flow.nn.Linear(512, 10))


def time_steps(step, steps: int) -> float:
    step()  # warm-up (compiles the graph)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def train_steps(steps: int):
    flow.manual_seed(0)
    x, y = flow.randn(256, 784), flow.randint(0, 10, (256,))
    eager_model, graph_model = mlp(), mlp()
    graph_model.load_state_dict(eager_model.state_dict())
    loss_fn = flow.nn.CrossEntropyLoss()
    eager_opt = flow.optim.SGD(eager_model.parameters(), lr=0.01, momentum=0.9)

    def eager_step():
        loss = loss_fn(eager_model(x), y)
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()

    class TrainGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = graph_model
            self.loss_fn = loss_fn
            self.add_optimizer(flow.optim.SGD(graph_model.parameters(), lr=0.01, momentum=0.9))

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    graph = TrainGraph()
    eager = time_steps(eager_step, steps)
    graphed = time_steps(lambda: graph(x, y), steps)
    return eager, graphed, graph, graph_model


def server_latency(graph, requests: int):
    from flowserve.clients import HTTPClient

    class Infer(flow.nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    infer = Infer(graph.model.to(flow.nn.Module))
    infer(flow.randn(1, 784))
    with tempfile.TemporaryDirectory() as tmp:
        flow.save(infer, Path(tmp) / "mlp")
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "flowserve.cli", "serve", str(Path(tmp) / "mlp"),
                                   "--http-port", str(port), "--no-grpc", "--model-name", "mlp",
                                   "--log-level", "warning"], stderr=subprocess.PIPE, text=True)
        try:
            with HTTPClient(f"http://127.0.0.1:{port}") as client:
                wait_ready(client, server)
                x = np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
                for _ in range(20):
                    client.infer("mlp", {"x": x})
                lat = []
                for _ in range(requests):
                    start = time.perf_counter()
                    client.infer("mlp", {"x": x})
                    lat.append(time.perf_counter() - start)
        finally:
            server.terminate()
            server.wait(timeout=30)
    return np.array(lat) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    eager, graphed, graph, _ = train_steps(args.steps)
    print("| MLP 784-512-512-10, batch 256, SGD momentum | ms / step |")
    print("|---|---|")
    print(f"| flowserve eager | {eager * 1e3:.2f} |")
    print(f"| flowserve nn.Graph | {graphed * 1e3:.2f} |")
    print(f"| graph speed-up over eager | {eager / graphed:.2f}x |")
    ms = server_latency(graph, args.requests)
    print()
    print("| server round trip, HTTP JSON, batch 1, concurrency 1 | ms |")
    print("|---|---|")
    print(f"| p50 | {np.percentile(ms, 50):.3f} |")
    print(f"| p99 | {np.percentile(ms, 99):.3f} |")


if __name__ == "__main__":
    main()
