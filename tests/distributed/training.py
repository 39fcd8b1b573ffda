"""Models, data and training loops shared by the distributed workers and the
single-process references they are compared with (this file imports in both)."""

from __future__ import annotations

import numpy as np

import flowserve as flow
import flowserve.nn as nn
from tests.graph import helpers

GLOBAL_BATCH = 8
SGD_STEPS = ADAMW_STEPS = 5


def mlp() -> nn.Module:
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def convnet(sync: bool) -> nn.Module:
    flow.manual_seed(1)
    bn = nn.SyncBatchNorm(4) if sync else nn.BatchNorm2d(4)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, bias=False), bn, nn.ReLU(), nn.Flatten(), nn.Linear(4 * 5 * 5, 3))


MODELS = {"mlp": (mlp, (6,)), "conv": (convnet, (2, 5, 5))}


def make_model(kind: str, sync: bool = True) -> nn.Module:
    build, _ = MODELS[kind]
    return build(sync) if kind == "conv" else build()


OVERFLOW_STEP = 2  # with ``overflow``, the last sample of this step's batch overflows the loss


def batch(kind: str, step: int, rank: int = 0, world: int = 1, overflow: bool = False):
    """This rank's slice of the global batch of ``step`` (the whole of it for world 1)."""
    rng = np.random.default_rng(100 + step)
    x = rng.standard_normal((GLOBAL_BATCH, *MODELS[kind][1])).astype(np.float32)
    if overflow and step == OVERFLOW_STEP:
        x[-1] = 1e30  # only the last rank sees it: every rank must skip the step alike
    y = rng.standard_normal((GLOBAL_BATCH, 3)).astype(np.float32)
    local = GLOBAL_BATCH // world
    part = slice(rank * local, (rank + 1) * local)
    return flow.tensor(x[part]), flow.tensor(y[part])


def optimizers(model):
    """5 steps of SGD with momentum, then 5 of AdamW, as (optimizer, steps) pairs."""
    sgd = flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    adamw = flow.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)
    return [(sgd, range(SGD_STEPS)), (adamw, range(SGD_STEPS, SGD_STEPS + ADAMW_STEPS))]


def train_eager(model, kind: str, rank: int = 0, world: int = 1, wrap=None) -> None:
    net = wrap(model) if wrap is not None else model
    loss_fn = nn.MSELoss()
    for opt, steps in optimizers(model):
        for step in steps:
            x, y = batch(kind, step, rank, world)
            opt.zero_grad()
            loss_fn(net(x), y).backward()
            opt.step()


def train_eager_no_sync(model, kind: str, rank: int, world: int) -> np.ndarray:
    """DDP with two micro-batches per step, the first inside ``no_sync()``; returns the
    first parameter's gradient after the first ``no_sync`` backward (this rank's own)."""
    net = flow.nn.parallel.DistributedDataParallel(model)
    loss_fn = nn.MSELoss()
    local = None
    for opt, steps in optimizers(model):
        for step in steps:
            x, y = batch(kind, step, rank, world)
            half = x.shape[0] // 2
            opt.zero_grad()
            with net.no_sync():
                (loss_fn(net(x[:half]), y[:half]) * 0.5).backward()
            if local is None:
                local = next(model.parameters()).grad.numpy().copy()
            (loss_fn(net(x[half:]), y[half:]) * 0.5).backward()
            opt.step()
    return local


class TrainGraph(helpers.TrainGraph):
    """The graph tests' training graph with the MSE loss of these regressions."""

    def __init__(self, model, opt, accumulation: int = 1):
        super().__init__(model, opt, accumulation=accumulation)
        self.loss_fn = nn.MSELoss()


def train_graph(model, kind: str, rank: int = 0, world: int = 1, configure=None, overflow: bool = False) -> list:
    """Graph-mode training; returns the graphs (one per optimizer)."""
    graphs = []
    for opt, steps in optimizers(model):
        graph = TrainGraph(model, opt)
        if configure is not None:
            configure(graph)
        for step in steps:
            graph(*batch(kind, step, rank, world, overflow))
        graphs.append(graph)
    return graphs


def with_grad_scaler(configure=None):
    """A graph configuration adding a dynamic grad scaler."""

    def apply(graph):
        if configure is not None:
            configure(graph)
        graph.set_grad_scaler(flow.amp.GradScaler(init_scale=1024.0, growth_interval=2))

    return apply


def parameters(model) -> dict:
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


class TwoStages(nn.Module):
    """An MLP in two parts, one per pipeline stage."""

    def __init__(self):
        super().__init__()
        flow.manual_seed(2)
        self.front = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.back = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x):
        return self.back(self.front(x))


MICRO_BATCHES = 4
PIPELINE_STEPS = 3


def pipeline_optimizers(model):
    sgd = flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    adamw = flow.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)
    return [(sgd, range(PIPELINE_STEPS)), (adamw, range(PIPELINE_STEPS, 2 * PIPELINE_STEPS))]


def train_pipeline_reference(model) -> None:
    """One process, eager, the whole batch as 4 accumulated micro-batches."""
    loss_fn = nn.MSELoss()
    for opt, steps in pipeline_optimizers(model):
        for step in steps:
            x, y = batch("mlp", step)
            size = x.shape[0] // MICRO_BATCHES
            opt.zero_grad()
            for i in range(MICRO_BATCHES):
                part = slice(i * size, (i + 1) * size)
                (loss_fn(model(x[part]), y[part]) * (1.0 / MICRO_BATCHES)).backward()
            opt.step()
