"""The run that binds every array by address (what a graph on a CUDA GPU does, with
device memory; ``tests/gpu`` runs it there) gives the host-bound run's numbers. Here it
binds CPU memory: training state ping-pong, eager edits between steps, outputs the
runtime sizes (a new batch size)."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
from flowserve.nn.graph.compiled import BATCH_SESSIONS, CompiledGraph
from tests.graph.helpers import ForwardGraph, TrainGraph, assert_close, data, make_optimizer, mlp


@pytest.fixture
def bound_by_address(monkeypatch):
    monkeypatch.setattr(CompiledGraph, "run", CompiledGraph._run_on_device)


def _train(kind: str, steps: int = 4):
    model = mlp()
    graph = TrainGraph(model, make_optimizer(kind, model.parameters()))
    x, y = data()
    losses = []
    for step in range(steps):
        losses.append(graph(x, y).numpy().copy())
        with flow.no_grad():
            model[0].bias.add_(0.01 * step)  # an eager edit between steps
    return losses, [p.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_training_bound_by_address_equals_the_host_run(kind, monkeypatch):
    want_losses, want_params = _train(kind)
    monkeypatch.setattr(CompiledGraph, "run", CompiledGraph._run_on_device)
    got_losses, got_params = _train(kind)
    assert_close(got_losses, want_losses, rtol=1e-6, what="losses")
    for got, want in zip(got_params, want_params):
        assert_close(got, want, rtol=1e-6)


def test_inference_bound_by_address_at_a_new_batch_size(bound_by_address):
    model = mlp().eval()
    graph = ForwardGraph(model)
    for batch in (8, 3, 8):  # 3: an output the runtime allocates
        x = flow.tensor(np.random.default_rng(batch).standard_normal((batch, 12)).astype(np.float32))
        out = graph(x)
        assert out.shape == (batch, 4) and out.dtype == flow.float32
        assert_close(out.numpy(), model(x).numpy(), what=f"batch {batch}")


def test_a_dynamic_batch_inference_graph_keeps_a_session_per_batch_size(bound_by_address):
    """ONNX Runtime's CUDA convolutions plan cuDNN again whenever a session's input shape
    changes: the device run keeps a session per batch size (the last eight)."""
    model = mlp().eval()
    graph = ForwardGraph(model)
    sizes = (8, 3, 8, 5) + tuple(range(10, 20))
    for batch in sizes:
        x = flow.tensor(np.random.default_rng(batch).standard_normal((batch, 12)).astype(np.float32))
        assert_close(graph(x).numpy(), model(x).numpy(), what=f"batch {batch}")
    sessions = graph._parts.last._batch_sessions
    assert list(sessions) == list(sizes[-BATCH_SESSIONS:])
    assert sessions.sessions == BATCH_SESSIONS
