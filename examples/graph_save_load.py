"""Save and load a training graph's state (the nn.Graph guide's "Save and Load Graph
Models"): parameters, optimizer states and the train step, then resume exactly.

    python examples/graph_save_load.py
"""

import shutil
import tempfile

import numpy as np

import flowserve as flow
import flowserve.nn as nn

CHECKPOINT_SAVE_DIR = tempfile.mkdtemp() + "/GraphMLP"


def make_graph():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = flow.optim.Adam(model.parameters(), lr=1e-2)

    class GraphMLP(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = nn.CrossEntropyLoss()
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    return GraphMLP(), model


rng = np.random.default_rng(0)
x, y = flow.tensor(rng.standard_normal((64, 20)).astype(np.float32)), flow.tensor(rng.integers(0, 4, 64))

graph, _ = make_graph()
for epoch in range(2):
    print(f"epoch {epoch}: loss {float(graph(x, y).numpy()):.6f}")
shutil.rmtree(CHECKPOINT_SAVE_DIR, ignore_errors=True)  # clear the previous state
flow.save(graph.state_dict(), CHECKPOINT_SAVE_DIR)
print("saved:", ", ".join(k for k in graph.state_dict() if k not in ("model", "loss_fn")))

resumed, resumed_model = make_graph()
state_dict = flow.load(CHECKPOINT_SAVE_DIR)
resumed.load_state_dict(state_dict)  # before the first call of the new graph
print(f"resumed epoch 2: loss {float(resumed(x, y).numpy()):.6f}, "
      f"train step {int(resumed.state_dict()['System-Train-TrainStep'].numpy())}")

straight, straight_model = make_graph()
for _ in range(3):
    straight(x, y)
same = all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(resumed_model.parameters(), straight_model.parameters()))
print("resumed run equals an uninterrupted one:", same)
