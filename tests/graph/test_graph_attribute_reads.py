"""Plain values a graph's trace reads from its modules (``self.temperature = 0.5``, a mode
string, a convolution's stride) are written into the graph as constants; eager mode reads
them on every call. A graph whose trace read a value that changed since traces again, so it
computes what eager mode computes; attributes no trace read cost no trace."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn

from tests.graph.helpers import (DynamicForwardGraph, ForwardGraph, TrainGraph, assert_close,
                                 assert_same_params, data)


class _Scaled(nn.Module):
    """A linear layer whose forward reads a number, a string and a flag it holds."""

    def __init__(self):
        super().__init__()
        flow.manual_seed(0)
        self.fc = nn.Linear(12, 4)
        self.temperature = 0.5
        self.reduce = "none"
        self.shifted = False

    def forward(self, x):
        y = self.fc(x) / self.temperature
        if self.shifted:
            y = y - 1.0
        return y.sum(dim=1) if self.reduce == "sum" else y


@pytest.mark.parametrize("graph_cls", [ForwardGraph, DynamicForwardGraph])
def test_an_inference_graph_follows_numbers_strings_and_flags_its_trace_read(graph_cls):
    model = _Scaled().eval()
    graph = graph_cls(model)
    x, _ = data()
    changes = [("temperature", 0.25), ("shifted", True), ("reduce", "sum"), ("temperature", 2)]
    assert_close(graph(x).numpy(), model(x).numpy())
    for name, value in changes:
        setattr(model, name, value)
        assert_close(graph(x).numpy(), model(x).numpy(), what=f"{name} = {value!r}")


def test_a_changed_stride_gives_the_eager_shape():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU()).eval()
    graph = ForwardGraph(model)
    x = flow.randn(2, 3, 8, 8)
    assert graph(x).shape == (2, 4, 8, 8)
    model[0].stride = (2, 2)
    assert graph(x).shape == model(x).shape == (2, 4, 4, 4)
    assert_close(graph(x).numpy(), model(x).numpy())


def test_attributes_no_trace_read_do_not_trace_again():
    model = _Scaled().eval()
    graph = ForwardGraph(model)
    x, _ = data()
    graph(x)
    form = graph.parts.last
    model.epoch, model.fc.note = 3, "seen"
    model.temperature = 0.5  # set again to the value the trace read
    graph(x)
    assert graph.parts.last is form


def test_a_forward_that_counts_its_calls_is_traced_once():
    class Counting(_Scaled):
        def forward(self, x):
            self.calls = getattr(self, "calls", 0) + 1
            return super().forward(x)

    model = Counting().eval()
    graph = ForwardGraph(model)
    x, _ = data()
    graph(x)
    form = graph.parts.last
    for _ in range(3):
        graph(x)
    assert graph.parts.last is form


def test_a_training_graph_follows_a_loss_scale_changed_between_steps():
    graph_model, eager_model = _Scaled(), _Scaled()
    graph_opt = flow.optim.SGD(graph_model.parameters(), lr=0.1, momentum=0.9)
    eager_opt = flow.optim.SGD(eager_model.parameters(), lr=0.1, momentum=0.9)
    graph = TrainGraph(graph_model, graph_opt)
    x, y = data()
    for temperature in (0.5, 0.5, 2.0, 2.0, 0.1):
        graph_model.temperature = eager_model.temperature = temperature
        eager_opt.zero_grad()
        loss = nn.CrossEntropyLoss()(eager_model(x), y)
        loss.backward()
        eager_opt.step()
        assert_close(graph(x, y).numpy(), loss.numpy(), what=f"temperature {temperature}")
        assert_same_params(graph_model, eager_model)


def test_a_saved_graph_holds_the_value_of_its_last_call(tmp_path):
    model = _Scaled().eval()
    graph = ForwardGraph(model)
    x, _ = data()
    graph(x)
    model.temperature = 4.0
    graph(x)
    flow.save(graph, tmp_path / "graph")
    assert_close(flow.load(tmp_path / "graph")(x).numpy(), model(x).numpy())


def test_an_attribute_changed_before_every_call_says_so_once():
    model = _Scaled().eval()
    graph = ForwardGraph(model)
    x, _ = data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(10):
            model.temperature = 1.0 + step
            assert_close(graph(x).numpy(), model(x).numpy())
    said = [str(w.message) for w in caught if "changed between calls" in str(w.message)]
    assert len(said) == 1 and "model.temperature" in said[0] and "register_buffer" in said[0]


def test_a_copied_module_is_followed_like_the_original():
    model = copy.deepcopy(_Scaled()).eval()
    graph = ForwardGraph(model)
    x, _ = data()
    graph(x)
    model.temperature = 3.0
    np.testing.assert_allclose(graph(x).numpy(), model(x).numpy(), rtol=1e-5)


def test_a_value_held_in_a_buffer_is_read_at_run_time_without_a_new_trace():
    class Buffered(_Scaled):
        def __init__(self):
            super().__init__()
            del self.temperature
            self.register_buffer("temperature", flow.tensor(0.5))

    model = Buffered().eval()
    graph = ForwardGraph(model)
    x, _ = data()
    graph(x)
    form = graph.parts.last
    for value in (0.25, 4.0):
        model.temperature.fill_(value)
        assert_close(graph(x).numpy(), model(x).numpy(), what=f"temperature {value}")
    assert graph.parts.last is form
