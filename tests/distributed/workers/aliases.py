"""One rank of the alias run: a module whose initial values differ per rank, with
``detach()`` and ``.data`` handles taken before rank 0's state reaches it (eagerly through
DistributedDataParallel, then through a data-parallel nn.Graph's broadcast and its training
steps). Each handle shares its tensor's value, so after every write both hold the same;
OUT/aliases-rank<r>.npz holds each (handle, tensor) pair."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import flowserve as flow  # noqa: E402
from tests.distributed.training import TrainGraph  # noqa: E402

out = Path(sys.argv[1])
rank = flow.env.get_rank()
pairs = {}

flow.manual_seed(10 + rank)  # the ranks start apart: rank 0's values must reach every alias
eager = flow.nn.Linear(3, 2)
handles = {"ddp.weight.detach": eager.weight.detach(), "ddp.bias.data": eager.bias.data}
flow.nn.parallel.DistributedDataParallel(eager)
pairs.update({name: (h, eager.weight if "weight" in name else eager.bias) for name, h in handles.items()})

flow.manual_seed(20 + rank)
model = flow.nn.Linear(3, 2)
opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
graph = TrainGraph(model, opt)
x = flow.tensor(np.random.default_rng(rank).standard_normal((4, 3)).astype(np.float32))
y = flow.zeros(4, 2)
weight = model.weight.detach()
graph(x, y)  # traced: rank 0's state broadcast, then a step
buffer = opt.state[model.weight]["momentum_buffer"]
momentum = buffer.detach()
graph(x, y)
pairs.update({"graph.weight.detach": (weight, model.weight), "graph.momentum.detach": (momentum, buffer)})
np.savez(out / f"aliases-rank{rank}.npz",
         **{f"{name}.{side}": t.numpy() for name, pair in pairs.items() for side, t in zip(("alias", "tensor"), pair)})
