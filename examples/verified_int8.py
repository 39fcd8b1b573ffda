"""From training to a verified int8 model, served and queried.

Trains a small convolutional classifier in graph mode on synthetic images, saves it with a
DataLoader of held-out examples, exports a float32 and a calibrated int8 model into a model
repository (each proven on the examples), serves the repository (each version verified on
its examples before it is ready) and queries both versions::

    python examples/verified_int8.py
"""

from __future__ import annotations

import pathlib
import tempfile

import numpy as np

import flowserve as flow
import flowserve.nn as nn
from flowserve.clients import HTTPClient
from flowserve.exporter.verified import export_verified
from flowserve.server import InferenceServer, ServerSettings

CLASSES = 4


def synthetic_images(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Images whose class is a fixed pattern under noise: easy to learn in a few steps."""
    labels = np.random.default_rng(seed).integers(0, CLASSES, rows)
    patterns = np.random.default_rng(123).standard_normal((CLASSES, 3, 16, 16)).astype(np.float32)
    noise = np.random.default_rng(seed + 1).standard_normal((rows, 3, 16, 16)).astype(np.float32)
    return patterns[labels] + 0.5 * noise, labels


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.head(flow.flatten(self.features(x), 1))


class TrainGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.Adam(model.parameters(), lr=1e-2))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def train_and_save(directory: pathlib.Path) -> None:
    flow.manual_seed(0)
    graph = TrainGraph(SmallConvNet())
    x, y = synthetic_images(512, seed=0)
    loader = flow.utils.data.DataLoader(flow.utils.data.TensorDataset(flow.tensor(x), flow.tensor(y)),
                                        batch_size=64, shuffle=True)
    for epoch in range(2):
        for images, labels in loader:
            loss = graph(images, labels)
        print(f"epoch {epoch}: loss {loss.item():.4f}")
    held_x, held_y = synthetic_images(64, seed=100)
    held_out = flow.utils.data.TensorDataset(flow.tensor(held_x), flow.tensor(held_y))
    flow.save(graph, directory, examples=flow.utils.data.DataLoader(held_out, batch_size=16))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        train_and_save(root / "convnet")
        repo = root / "repo"
        for version, precision in ((1, "fp32"), (2, "int8")):
            result = export_verified(root / "convnet", repo / "convnet" / str(version) / "model.onnx",
                                     precision=precision, target="onnxruntime", rtol=1e-4)
            print(result.proof.table())
            print(result.proof.summary())
        (repo / "convnet" / "config.json").write_text('{"version_policy": {"policy": "all"}}')
        settings = ServerSettings(model_path=str(repo), http_port=0, grpc_port=0, log_level="warning")
        with InferenceServer(settings).background() as server:
            client = HTTPClient(server.http_url)
            print("repository:", [(r["name"], r["version"], r["state"]) for r in client.repository_index()])
            x, labels = synthetic_images(32, seed=200)
            for version in ("1", "2"):
                parameters = client.model_metadata("convnet", version)["parameters"]
                figures = parameters["verification"]
                logits = client.infer("convnet", {"x": x}, version=version)["output_0"]
                accuracy = float(np.mean(logits.argmax(1) == labels))
                print(f"version {version} ({figures['precision']}): verified={parameters['verified']}, "
                      f"top-1 agreement on examples {figures['top1_agreement']:.2%}, "
                      f"accuracy on new data {accuracy:.2%}")


if __name__ == "__main__":
    main()
