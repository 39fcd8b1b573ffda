"""Train MobileNetV2 a few steps in graph mode, save it, export fused ONNX, run it.

    python examples/export_mobilenet.py
"""

import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

import flowserve as flow
import flowserve.models
import flowserve.nn as nn
from flowserve.exporter import export

model = flow.models.mobilenet_v2(num_classes=10, width_mult=0.5)


class TrainGraph(nn.Graph):
    def __init__(self):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


graph = TrainGraph()
x, y = flow.randn(8, 3, 32, 32), flow.tensor(np.arange(8) % 10)
for step in range(3):
    print(f"step {step}: loss {graph(x, y).item():.4f}")

with tempfile.TemporaryDirectory() as tmp:
    saved = Path(tmp) / "mobilenet"
    flow.save(graph, saved)
    result = export(saved, Path(tmp) / "mobilenet.onnx", target="onnxruntime")
    print(result.report.summary())
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    batch = np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32)
    logits = session.run(None, {session.get_inputs()[0].name: batch})[0]
    model.eval()
    print("max |onnx - eager|:", float(np.abs(logits - model(flow.tensor(batch)).numpy()).max()))
