"""Train a small convnet with nn.Graph on the GPU (the CPU where there is none), save it,
and serve the saved directory on the same device.

On a GPU the parameters and the optimizer state stay on the device between steps; only
the loss is copied back, when printed. The eager module holds the graph's values, so an
eager forward after training gives the graph's numbers::

    pip install "flowserve[cuda]"      # onnxruntime-gpu, CUDA 13 libraries and CuPy
    python examples/gpu_train_and_serve.py
"""

from __future__ import annotations

import pathlib
import tempfile

import numpy as np

import flowserve as flow
import flowserve.nn as nn
from flowserve.clients import HTTPClient
from flowserve.onnx_backend.runtime import cuda_usable
from flowserve.server import InferenceServer, ServerSettings

DEVICE = "cuda" if flow.cuda.is_available() and cuda_usable() else "cpu"


class TrainGraph(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


class EvalGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def main() -> None:
    flow.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(32, 10)).to(DEVICE)
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    rng = np.random.default_rng(0)
    images = flow.tensor(rng.standard_normal((64, 3, 32, 32)).astype(np.float32), device=DEVICE)
    labels = flow.tensor(rng.integers(0, 10, 64), device=DEVICE)
    for step in range(20):
        loss = graph(images, labels)  # a tensor on DEVICE: nothing is copied to the host here
        if step % 5 == 0:
            print(f"step {step:2d}  loss {loss.item():.4f}  (on {loss.device})")

    model.eval()
    evaluation = EvalGraph(model)
    logits = evaluation(images[:8])
    eager = model(images[:8])
    print("graph equals eager after training:", np.allclose(logits.numpy(), eager.numpy(), rtol=1e-4, atol=1e-5))

    with tempfile.TemporaryDirectory() as tmp:
        saved = pathlib.Path(tmp) / "convnet"
        flow.save(evaluation, saved)
        settings = ServerSettings(model_path=str(saved), http_port=0, grpc_port=0, device="auto", log_level="warning")
        with InferenceServer(settings).background() as server:
            http = HTTPClient(server.http_url)
            (name,) = [row["name"] for row in http.repository_index()]
            kind = http.model_config(name)["instance_group"][0]["kind"]
            input_name = http.model_metadata(name)["inputs"][0]["name"]
            (served,) = http.infer(name, {input_name: images[:8].numpy()}).values()
            print(f"served on {kind}: equals the graph:", np.allclose(served, logits.numpy(), rtol=1e-4, atol=1e-4))


if __name__ == "__main__":
    main()
