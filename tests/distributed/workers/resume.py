"""Graph data parallelism with AdamW, saved by rank 0 after step 3 and resumed.

``full OUT``: 5 steps, rank 0 saves ``graph.state_dict()`` after step 3 to OUT/ckpt;
``resume OUT``: every rank loads OUT/ckpt into a fresh graph and runs steps 4 and 5.
Final parameters and optimizer state go to OUT/<mode>-rank<r>.npz."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import flowserve as flow  # noqa: E402
from tests.distributed.training import TrainGraph, batch, make_model  # noqa: E402

mode, out = sys.argv[1], Path(sys.argv[2])
rank, world = flow.env.get_rank(), flow.env.get_world_size()
model = make_model("mlp")
graph = TrainGraph(model, flow.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05))
steps = range(5)
if mode == "resume":
    graph.load_state_dict(flow.load(out / "ckpt"))
    steps = range(3, 5)
for step in steps:
    graph(*batch("mlp", step, rank, world))
    if mode == "full" and step == 2:
        state = graph.state_dict()
        if rank == 0:
            flow.save(state, out / "ckpt")
        flow.env.barrier()
flat = {}
for key, value in graph.state_dict().items():
    items = value.items() if isinstance(value, dict) else [("", value)]
    flat.update({f"{key}.{k}" if k else key: v.numpy() for k, v in items})
np.savez(out / f"{mode}-rank{rank}.npz", **flat)
