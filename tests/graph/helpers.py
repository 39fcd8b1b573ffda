"""Small models and eager reference loops shared by the graph tests."""

from __future__ import annotations

import numpy as np

import flowserve as flow
import flowserve.nn as nn


def mlp(seed: int = 0, sizes=(12, 16, 16, 4)) -> nn.Module:
    flow.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Block(nn.Module):
    """Two linear layers with a residual: a unit to checkpoint."""

    def __init__(self, width: int):
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, x):
        return x + self.fc2(self.fc1(x).tanh())


class ResMLP(nn.Module):
    def __init__(self, width: int = 16, classes: int = 4, seed: int = 0):
        super().__init__()
        flow.manual_seed(seed)
        self.stem = nn.Linear(12, width)
        self.block1 = Block(width)
        self.block2 = Block(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.block2(self.block1(self.stem(x).relu())))


def data(batch: int = 16, features: int = 12, classes: int = 4, seed: int = 1):
    rng = np.random.default_rng(seed)
    x = flow.tensor(rng.standard_normal((batch, features)).astype(np.float32))
    y = flow.tensor(rng.integers(0, classes, size=batch).astype(np.int64))
    return x, y


def make_optimizer(kind: str, params):
    if kind == "sgd":
        return flow.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)
    if kind == "adam":
        return flow.optim.Adam(params, lr=1e-2, weight_decay=1e-3)
    if kind == "adamw":
        return flow.optim.AdamW(params, lr=1e-2, weight_decay=5e-2)
    raise ValueError(kind)


def eager_steps(model, opt, sched, x, y, steps: int, micro: int = 1) -> list:
    """Eager training: ``micro`` micro-batches of loss/micro per step, then the update."""
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    n = x.shape[0] // micro
    for _ in range(steps):
        opt.zero_grad()
        step_losses = []
        for i in range(micro):
            loss = loss_fn(model(x[i * n:(i + 1) * n]), y[i * n:(i + 1) * n])
            (loss / micro).backward() if micro > 1 else loss.backward()
            step_losses.append(loss.numpy())
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(np.array(step_losses) if micro > 1 else step_losses[0])
    return losses


class ForwardGraph(nn.Graph):
    """An inference graph of ``model``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


class DynamicForwardGraph(ForwardGraph):
    """``ForwardGraph`` compiled for each input signature it meets."""

    @nn.Graph.with_dynamic_input_shape()
    def __init__(self, model):
        super().__init__(model)


class TrainGraph(nn.Graph):
    def __init__(self, model, opt, sched=None, accumulation: int = 1, provider: str | None = None):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(opt, lr_sch=sched)
        if accumulation > 1:
            self.config.set_gradient_accumulation_steps(accumulation)
        if provider is not None:
            self.config.set_execution_provider(provider)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def assert_close(actual, expected, rtol: float = 1e-5, what: str = "") -> None:
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    scale = max(float(np.abs(expected).max()), 1e-12) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale, err_msg=what)


def assert_same_params(graph_model, eager_model, rtol: float = 1e-5) -> None:
    for (name, a), (_, b) in zip(graph_model.named_parameters(), eager_model.named_parameters()):
        assert_close(a.numpy(), b.numpy(), rtol, name)
