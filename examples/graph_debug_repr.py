"""Debugging in graph mode (the nn.Graph guide's "Debugging in Graph Mode"): print a graph
before and after its first call, and turn on debug output while it builds.

    python examples/graph_debug_repr.py [--v-level 1]
"""

import argparse

import flowserve as flow
import flowserve.models
import flowserve.nn as nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--v-level", type=int, default=1, help="debug verbosity, 0..3")
args = parser.parse_args()

model = flowserve.models.mobilenet_v2(num_classes=10)
model.train()
loss_fn = nn.CrossEntropyLoss()
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
print(graph_mobile_net_v2)  # before the first call: the structure

graph_mobile_net_v2.debug(v_level=args.v_level)  # build stages, modules (1), ops (2), locations (3)
x, y = flow.rand(8, 3, 32, 32), flow.randint(0, 10, (8,))
graph_mobile_net_v2(x, y)

print(graph_mobile_net_v2)  # after it: inputs and outputs of the graph and of each module
