"""One rank of a 2-stage pipeline: ``model.front`` on rank 0, ``model.back`` on rank 1,
4 micro-batches per step (3 SGD-momentum then 3 AdamW steps); every rank is fed the whole
batch. Final parameters to OUT/pipeline-rank<r>.npz, the AdamW graph's other states to
OUT/optimizer-rank<r>.npz, the losses to OUT/losses-rank<r>.npy."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import flowserve as flow  # noqa: E402
from flowserve.nn.graph import GraphModule  # noqa: E402
from tests.distributed.training import (  # noqa: E402
    MICRO_BATCHES,
    TrainGraph,
    TwoStages,
    batch,
    parameters,
    pipeline_optimizers,
)

out = Path(sys.argv[1])
rank = flow.env.get_rank()
model = TwoStages()
losses = []
for opt, steps in pipeline_optimizers(model):
    graph = TrainGraph(model, opt, accumulation=MICRO_BATCHES)
    graph.model.front.to(GraphModule).set_stage(0, [0])
    graph.model.back.to(GraphModule).set_stage(1, [1])
    for step in steps:
        losses.append(graph(*batch("mlp", step)).numpy())
np.savez(out / f"pipeline-rank{rank}.npz", **parameters(model))
optimizer_state = {k: v.numpy() for k, v in graph.state_dict().items() if not isinstance(v, dict)}
np.savez(out / f"optimizer-rank{rank}.npz", **optimizer_state)
np.save(out / f"losses-rank{rank}.npy", np.stack(losses))
