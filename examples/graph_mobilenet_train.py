"""Training MobileNetV2 in graph mode (the nn.Graph guide's "Training in Graph Mode"), on
synthetic CIFAR-10-sized data so that it runs anywhere without a download.

    python examples/graph_mobilenet_train.py [--steps 20] [--batch 16]
"""

import argparse

import numpy as np

import flowserve as flow
import flowserve.models
import flowserve.nn as nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--batch", type=int, default=16)
args = parser.parse_args()

BATCH_SIZE = args.batch
DEVICE = "cuda" if flow.cuda.is_available() else "cpu"
print("Using {} device".format(DEVICE))


def synthetic_cifar10(steps, batch):
    """Images (N, 3, 32, 32) in [0, 1] and labels in [0, 10): what ToTensor() gives."""
    rng = np.random.default_rng(0)
    for _ in range(steps):
        yield (flow.tensor(rng.random((batch, 3, 32, 32), dtype=np.float32)),
               flow.tensor(rng.integers(0, 10, size=batch)))


model = flowserve.models.mobilenet_v2(num_classes=10).to(DEVICE)
model.train()

loss_fn = nn.CrossEntropyLoss().to(DEVICE)
optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)


class GraphMobileNetV2(flow.nn.Graph):
    def __init__(self):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(optimizer)

    def build(self, x, y):
        y_pred = self.model(x)
        loss = self.loss_fn(y_pred, y)
        loss.backward()
        return loss


graph_mobile_net_v2 = GraphMobileNetV2()
# graph_mobile_net_v2.debug()

for batch, (x, y) in enumerate(synthetic_cifar10(args.steps, BATCH_SIZE)):
    x = x.to(DEVICE)
    y = y.to(DEVICE)
    loss = graph_mobile_net_v2(x, y)
    current = batch * BATCH_SIZE
    if batch % 5 == 0:
        print(f"loss: {float(loss.numpy()):>7f}  [{current:>5d}/{args.steps * BATCH_SIZE:>5d}]")
