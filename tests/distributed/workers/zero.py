"""One rank of the ZeRO run: the MLP trained by graph data parallelism without ZeRO and
with ZeRO stages 1 and 2 (5 SGD-momentum + 5 AdamW steps each). Writes
OUT/<variant>-rank<r>.npz (every state of the AdamW graph's ``state_dict()``) and, for
the ZeRO variants, OUT/<variant>-rank<r>.json with the optimizer-state bytes held; with a
grad scaler and a step whose gradients overflow on rank 1 only, the parameters to OUT/zero2_scaler-params-rank<r>.npz.
Last, a ZeRO graph whose build() reads the optimizer's per-parameter state: the error it
raises is printed."""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import flowserve as flow  # noqa: E402
from tests.distributed.training import (  # noqa: E402
    TrainGraph,
    batch,
    make_model,
    parameters,
    train_graph,
    with_grad_scaler,
)

out = Path(sys.argv[1])
rank, world = flow.env.get_rank(), flow.env.get_world_size()
for variant, stage in (("dp", None), ("zero1", 1), ("zero2", 2), ("zero2_scaler", 2)):
    model = make_model("mlp")
    configure = None if stage is None else (lambda g, s=stage: g.config.enable_zero(True, stage=s))
    if variant.endswith("scaler"):
        configure = with_grad_scaler(configure)
    overflow = variant.endswith("scaler")
    graph = train_graph(model, "mlp", rank, world, configure=configure, overflow=overflow)[-1]
    if variant.endswith("scaler"):
        np.savez(out / f"{variant}-params-rank{rank}.npz", **parameters(model))
        continue
    flat = {}
    for key, value in graph.state_dict().items():  # a collective with ZeRO: every rank calls it
        items = value.items() if isinstance(value, dict) else [("", value)]
        flat.update({f"{key}.{k}" if k else key: v.numpy() for k, v in items})
    np.savez(out / f"{variant}-rank{rank}.npz", **flat)
    if stage is not None:
        mine, full = graph.parts.parallel.zero.state_bytes()
        print(f"rank {rank} ZeRO stage {stage}: AdamW state {mine} bytes of {full} ({mine / full:.3f} of the "
              f"whole, 1/N = {1 / world:.3f})", flush=True)
        (out / f"{variant}-rank{rank}.json").write_text(json.dumps({"mine": mine, "full": full}))
        if rank == 0:
            flow.save(graph, out / f"{variant}-saved")

model = make_model("mlp")  # build() reading the per-parameter state the shards hold instead
opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


class ReadsState(TrainGraph):
    def build(self, x, y):
        loss = super().build(x, y)
        return loss, opt.state[model[0].weight]["momentum_buffer"] * 1.0


graph = ReadsState(model, opt)
graph.config.enable_zero(True, stage=1)
try:
    graph(*batch("mlp", 0, rank, world))
except flow.errors.GraphError as exc:
    print(f"rank {rank} refused: {exc}", flush=True)
