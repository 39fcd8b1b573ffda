"""The four reference models of ``flowserve.models`` trained a few steps on synthetic data
whose classes are easy to tell apart, saved with a DataLoader of held-out examples, and
exported at every CPU precision. Shared by the exporter, server and client tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import flowserve as flow
import flowserve.models  # noqa: F401
import flowserve.nn as nn
from flowserve.exporter.verified import export_verified

CLASSES = 4
PRECISIONS = ("fp32", "int8", "int8-dynamic", "fp16")
EXAMPLE_ROWS, EXAMPLE_BATCH = 16, 8
# With 16 example rows one row flipped is 93.75%: a briefly trained MobileNetV2 has rows so
# near a class boundary that static int8 rounding flips one or two of them (per-tensor
# activation scales). The default 0.99 and its refusal are tested on their own.
MIN_AGREEMENT = 0.85


def _images(rows: int, labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    templates = np.random.default_rng(99).standard_normal((CLASSES, 3, size, size)).astype(np.float32)
    return (templates[labels] + 0.3 * rng.standard_normal((rows, 3, size, size))).astype(np.float32)


def _tokens(rows: int, labels: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (labels[:, None] * 6 + rng.integers(0, 6, (rows, 6))).astype(np.int64)


def _vectors(rows: int, labels: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(98).standard_normal((CLASSES, 20)).astype(np.float32) * 2
    return (centres[labels] + 0.5 * rng.standard_normal((rows, 20))).astype(np.float32)


MODELS = {  # name: (factory, inputs(rows, labels, seed), learning rate, training steps)
    "mlp": (lambda: flow.models.mlp(20, (32, 32), CLASSES), _vectors, 0.05, 4),
    "resnet18": (lambda: flow.models.resnet18(num_classes=CLASSES), lambda n, y, s: _images(n, y, 16, s), 0.01, 4),
    # fewer steps leave rows so near a class boundary that int8 rounding flips them
    "mobilenet_v2": (lambda: flow.models.mobilenet_v2(num_classes=CLASSES, width_mult=0.35),
                     lambda n, y, s: _images(n, y, 32, s), 0.01, 12),
    "transformer": (lambda: flow.models.transformer_classifier(vocab_size=CLASSES * 6, num_classes=CLASSES,
                                                               d_model=16, nhead=2, num_layers=1,
                                                               dim_feedforward=32, dropout=0.0),
                    lambda n, y, s: _tokens(n, y, s), 0.05, 4),
}


class TrainGraph(nn.Graph):
    def __init__(self, model, lr: float):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.Adam(model.parameters(), lr=lr))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def example_labels() -> np.ndarray:
    return labels(EXAMPLE_ROWS, 1000)


def labels(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, CLASSES, rows)


def train_and_save(name: str, directory: Path) -> Path:
    """Train ``name`` a few steps in graph mode and save it with a DataLoader of examples."""
    factory, make, lr, steps = MODELS[name]
    flow.manual_seed(0)
    model = factory()
    model.train()
    graph = TrainGraph(model, lr)
    for step in range(steps):
        y = labels(16, step)
        graph(flow.tensor(make(16, y, step)), flow.tensor(y))
    # after a few steps BatchNorm's running statistics are near their initial values and the
    # convnets would predict one class in eval mode: recompute them from one batch of data
    y = labels(64, 500)
    flow.optim.swa_utils.update_bn([flow.tensor(make(64, y, 500))], model)
    y = example_labels()
    dataset = flow.utils.data.TensorDataset(flow.tensor(make(EXAMPLE_ROWS, y, 1000)), flow.tensor(y))
    flow.save(graph, directory, examples=flow.utils.data.DataLoader(dataset, batch_size=EXAMPLE_BATCH))
    return directory


def build_deployments(root: Path) -> dict:
    """name -> (saved dir, {precision: VerifiedExport}) for every model, exports written as
    ``root/<name>.<precision>.onnx`` with their examples beside them."""
    out = {}
    for name in MODELS:
        directory = train_and_save(name, root / name)
        exports = {p: export_verified(directory, root / f"{name}.{p}.onnx", precision=p, target="onnxruntime",
                                      rtol=1e-4, min_agreement=MIN_AGREEMENT)
                   for p in PRECISIONS}
        out[name] = (directory, exports)
    return out
