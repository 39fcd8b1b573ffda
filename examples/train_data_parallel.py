"""Data-parallel training with 2 processes: nn.Graph, SyncBatchNorm, DistributedSampler.

    python -m flowserve.distributed.launch --nproc_per_node 2 examples/train_data_parallel.py
    python -m flowserve.distributed.launch --nproc_per_node 2 examples/train_data_parallel.py --eager

Each process reads its own part of the dataset (DistributedSampler), computes gradients on
it, and the gradients are averaged over the processes inside the compiled step (or by
DistributedDataParallel with --eager); BatchNorm statistics are those of the whole batch
(SyncBatchNorm). Rank 0 prints the loss and saves the deployable directory, which
`flowserve export` and `flowserve serve` take as they take one process's. Run without the
launcher, the script trains in one process.
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np

import flowserve as flow
import flowserve.nn as nn
from flowserve.utils.data import DataLoader, DistributedSampler, TensorDataset


def dataset(n: int = 256) -> TensorDataset:
    """Images whose class is the quadrant with the brightest mean."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 1, 8, 8)).astype(np.float32)
    y = np.array([np.argmax([q.mean() for q in (im[0, :4, :4], im[0, :4, 4:], im[0, 4:, :4], im[0, 4:, 4:])])
                  for im in x])
    return TensorDataset(flow.tensor(x), flow.tensor(y))


def convnet() -> nn.Module:
    flow.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.SyncBatchNorm(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 4))


class TrainGraph(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--eager", action="store_true", help="DistributedDataParallel instead of nn.Graph")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default=None, help="where rank 0 saves the trained graph")
    args = parser.parse_args()
    rank, world = flow.env.get_rank(), flow.env.get_world_size()
    data = dataset()
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=64 // world, sampler=sampler, drop_last=True)
    model = convnet()
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if args.eager:
        net, loss_fn = nn.parallel.DistributedDataParallel(model), nn.CrossEntropyLoss()
    else:
        graph = TrainGraph(model, optimizer)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        losses = []
        for x, y in loader:
            if args.eager:
                optimizer.zero_grad()
                loss = loss_fn(net(x), y)
                loss.backward()
                optimizer.step()
            else:
                loss = graph(x, y)
            losses.append(float(loss))
        if rank == 0:
            print(f"epoch {epoch}: loss {np.mean(losses):.4f} ({world} processes)", flush=True)
    if rank == 0 and not args.eager:
        out = Path(args.out or tempfile.mkdtemp(prefix="flowserve-dp-")) / "convnet"
        flow.save(graph, out)
        print(f"saved {out}")


if __name__ == "__main__":
    main()
