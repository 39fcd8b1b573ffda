"""Quantization-aware training of a small MobileNetV2, exported to int8 with the scales it learned.

A float32 MobileNetV2 (width 0.5, 32x32 inputs) is trained a few steps in graph mode on
synthetic images, then fine-tuned with quantization-aware training (``graph.config.
enable_qat(True)``: fake-quantized weights and activations, BatchNorm folded as deployed)
as a student of the float32 model; the QAT graph is saved with held-out examples and
exported with ``--precision int8``, which takes the learned scales (no calibration) and
checks the int8 model on the examples. The export is forced: ONNX Runtime's integer
kernels compute each quantized node as the graph does, but within a step, and this briefly
trained model amplifies those one-step differences (large BatchNorm-folded gains) until some
of its near-tied top-1 classes change, below the proof's threshold (docs/export.md, "Where
the int8 model's differences from the QAT graph come from"; a float32 model trained to its
data's BatchNorm statistics is fine-tuned with them frozen instead, ``freeze_bn_after=0``,
as the benchmark does); the summary says so::

    python examples/qat_mobilenet.py
"""

from __future__ import annotations

import copy
import pathlib
import tempfile

import numpy as np

import flowserve as flow
import flowserve.nn as nn
from flowserve.exporter.verified import export_verified

CLASSES = 4


def synthetic_images(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    labels = np.random.default_rng(seed).integers(0, CLASSES, rows)
    patterns = np.random.default_rng(123).standard_normal((CLASSES, 3, 32, 32)).astype(np.float32)
    noise = np.random.default_rng(seed + 1).standard_normal((rows, 3, 32, 32)).astype(np.float32)
    return patterns[labels] + 0.5 * noise, labels


class TrainGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.Adam(model.parameters(), lr=1e-3))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


class QATGraph(nn.Graph):
    """The student learns the float32 teacher's logits, with int8 rounding in the loop."""

    def __init__(self, student):
        super().__init__()
        self.model = student
        self.add_optimizer(flow.optim.Adam(student.parameters(), lr=1e-4))
        self.config.enable_qat(True)
        self.config.set_qat_config(moving_min_max_stop_update_after_iters=6)

    def build(self, x, teacher_logits):
        loss = ((self.model(x) - teacher_logits) ** 2).mean()
        loss.backward()
        return loss


def main() -> None:
    flow.manual_seed(0)
    teacher = flow.models.mobilenet_v2(num_classes=CLASSES, width_mult=0.5)
    train = TrainGraph(teacher)
    for step in range(6):
        x, y = synthetic_images(16, step)
        loss = train(flow.tensor(x), flow.tensor(y))
    print(f"float32 training loss {float(loss):.3f}")
    x, _ = synthetic_images(64, 50)  # BatchNorm's running statistics from data (a few steps leave them at init)
    flow.optim.swa_utils.update_bn([flow.tensor(x)], teacher)
    teacher.eval()
    student = copy.deepcopy(teacher).train()
    qat = QATGraph(student)
    for step in range(8):
        x, _ = synthetic_images(16, 100 + step)
        loss = qat(flow.tensor(x), teacher(flow.tensor(x)).detach())
    print(f"QAT distillation loss {float(loss):.4f}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp) / "mobilenet_qat"
        held_out, _ = synthetic_images(32, 999)
        flow.save(qat, folder, examples=[flow.tensor(held_out[:16]), flow.tensor(held_out[16:])])
        result = export_verified(folder, pathlib.Path(tmp) / "mobilenet.int8.onnx", precision="int8", force=True)
        print(("FORCED: " if result.forced else "") + result.proof.summary())
        student.eval()
        agreement = np.mean(student(flow.tensor(held_out)).numpy().argmax(1)
                            == teacher(flow.tensor(held_out)).numpy().argmax(1))
        print(f"QAT model vs float32 teacher on the held-out images: top-1 agreement {agreement:.0%}")


if __name__ == "__main__":
    main()
