"""One rank of the data-parallel acceptance run: for each model, DDP (eager) and nn.Graph
data parallelism, 5 SGD-momentum + 5 AdamW steps on this rank's slice of the batch;
final parameters to OUT/<mode>-<model>-rank<r>.npz."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import flowserve as flow  # noqa: E402
from tests.distributed.training import (  # noqa: E402
    make_model,
    parameters,
    train_eager,
    train_eager_no_sync,
    train_graph,
)

out, models = Path(sys.argv[1]), sys.argv[2].split(",")
rank, world = flow.env.get_rank(), flow.env.get_world_size()
for kind in models:
    model = make_model(kind)
    train_eager(model, kind, rank, world, wrap=flow.nn.parallel.DistributedDataParallel)
    np.savez(out / f"ddp-{kind}-rank{rank}.npz", **parameters(model))
    if kind == "mlp":
        model = make_model(kind)
        local_grad = train_eager_no_sync(model, kind, rank, world)
        np.savez(out / f"no_sync-{kind}-rank{rank}.npz", **parameters(model))
        np.save(out / f"no_sync-local-grad-rank{rank}.npy", local_grad)
    model = make_model(kind)
    graphs = train_graph(model, kind, rank, world)
    np.savez(out / f"graph-{kind}-rank{rank}.npz", **parameters(model))
    if rank == 0 and kind == "conv":
        flow.save(graphs[-1], out / "saved")
