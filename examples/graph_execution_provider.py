"""Choose the engine that runs an nn.Graph: ONNX Runtime's CPU provider or OpenVINO.

Trains a small convnet for a few steps on each available provider from the same start and
prints the losses side by side (OpenVINO needs ``pip install "flowserve[openvino]"``).

    python examples/graph_execution_provider.py --steps 3
"""

import argparse

import numpy as np

import flowserve as flow
import flowserve.nn as nn
from flowserve.onnx_backend import openvino


def convnet():
    flow.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
                         nn.Conv2d(16, 16, 3, 2, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


class TrainGraph(nn.Graph):
    def __init__(self, model, provider):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9))
        self.config.set_execution_provider(provider)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((8, 3, 16, 16)).astype(np.float32))
    y = flow.tensor(rng.integers(0, 10, 8))
    providers = ["cpu"] + (["openvino"] if openvino.available() else [])
    losses = {}
    for provider in providers:
        graph = TrainGraph(convnet(), provider)
        losses[provider] = [float(graph(x, y).numpy()) for _ in range(args.steps)]
    if len(providers) == 1:
        print('OpenVINO is not installed (pip install "flowserve[openvino]"): ONNX Runtime CPU only')
    for step in range(args.steps):
        print(f"step {step}: " + "  ".join(f"{p} loss {losses[p][step]:.6f}" for p in providers))


if __name__ == "__main__":
    main()
