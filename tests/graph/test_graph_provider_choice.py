"""The engine a graph runs on: ``set_execution_provider("auto")`` measures the candidates
(``flowserve.nn.graph.provider_choice``) and caches its choice; an explicit OpenVINO is checked
against ONNX Runtime; the optimizer step is lowered without a ``Neg`` shared by updates
(OpenVINO fused updates of different shapes through it)."""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import onnx
import pytest

import flowserve as flow
from flowserve.onnx_backend import openvino
from flowserve.nn.graph import provider_choice
from flowserve import nn
from flowserve.nn.graph.compiled import CompiledGraph
from tests.graph.helpers import TrainGraph, data
from tests.graph.test_graph_provider import _data, _model, _train

needs_runtime = pytest.mark.skipif(not openvino.runtime_available(), reason="needs the openvino package")


class _Session:
    """A stand-in session: ``run`` sleeps ``seconds`` and answers ``outs``."""

    def __init__(self, seconds: float, outs: list, fail: bool = False):
        self.seconds, self.outs, self.fail = seconds, outs, fail

    def run(self, names, feeds, options=None):
        if self.fail:
            raise RuntimeError("no kernel for op Foo\nmore detail")
        time.sleep(self.seconds)
        return [np.asarray(o) for o in self.outs]


def _measure(sessions: dict) -> provider_choice.EngineChoice:
    return provider_choice.measure({k: (lambda s=s: s) for k, s in sessions.items()}, {}, ["loss"], "G")


def test_measure_keeps_the_fastest_engine():
    choice = _measure({"cpu": _Session(0.02, [1.0]), "openvino": _Session(0.005, [1.0 + 1e-6])})
    assert choice.engine == "openvino" and set(choice.step_ms) == {"cpu", "openvino"} and not choice.dropped
    assert choice.step_ms["openvino"] < choice.step_ms["cpu"]


def test_measure_drops_a_different_loss_a_failure_and_a_slow_engine(caplog):
    choice = _measure({"cpu": _Session(0.002, [2.0]), "openvino": _Session(0.0, [2.01])})
    assert choice.engine == "cpu" and "beyond float32 rounding" in choice.dropped["openvino"]
    assert "dropped from the measurement" in caplog.text
    choice = _measure({"cpu": _Session(0.002, [2.0]), "openvino": _Session(0.0, [2.0], fail=True)})
    assert choice.dropped["openvino"] == "failed: RuntimeError: no kernel for op Foo"
    choice = _measure({"cpu": _Session(0.002, [2.0]), "openvino": _Session(0.3, [2.0])})
    assert choice.engine == "cpu" and "openvino" in choice.dropped and "openvino" not in choice.step_ms


def test_measure_drops_an_engine_compiling_beyond_the_budget(monkeypatch):
    monkeypatch.setattr(provider_choice, "BUDGET_S", 0.5)
    slow_compile = _Session(0.0, [1.0])

    def build_slowly():
        time.sleep(3.0)
        return slow_compile

    choice = provider_choice.measure({"cpu": lambda: _Session(0.001, [1.0]), "openvino": build_slowly}, {}, ["loss"], "G")
    assert choice.engine == "cpu" and choice.dropped["openvino"] == "not compiled within the 0.5 s measuring budget"


def test_measure_without_comparing_checks_shapes_and_finiteness():
    random = {"cpu": _Session(0.002, [2.0]), "openvino": _Session(0.0, [2.3])}
    choice = provider_choice.measure({k: (lambda s=s: s) for k, s in random.items()}, {}, ["loss"], "G", compare=False)
    assert choice.engine == "openvino" and "outputs not compared" in choice.describe()
    nan = {"cpu": _Session(0.002, [2.0]), "openvino": _Session(0.0, [float("nan")])}
    choice = provider_choice.measure({k: (lambda s=s: s) for k, s in nan.items()}, {}, ["loss"], "G", compare=False)
    assert choice.dropped["openvino"] == "output 0 is not finite where ONNX Runtime's is"


def test_choice_cache_round_trip_and_damaged_files(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWSERVE_CACHE_DIR", str(tmp_path))
    model = _train("cpu")[2]._compiled.model
    path = provider_choice.cache_path(model)
    other = onnx.ModelProto()
    other.CopyFrom(model)
    other.graph.name = "another name"
    assert path.parent == tmp_path / "engines" and path == provider_choice.cache_path(other)
    other.graph.node[0].name += "x"
    assert path != provider_choice.cache_path(other)
    choice = provider_choice.EngineChoice("openvino", {"cpu": 3.0, "openvino": 2.0}, {}, 1.5)
    provider_choice.save_cached(path, choice)
    assert json.loads(path.read_text())["engine"] == "openvino"
    loaded = provider_choice.load_cached(path, ["cpu", "openvino"])
    assert loaded.cached and loaded.engine == "openvino" and loaded.step_ms == choice.step_ms
    assert "cached" in loaded.describe()
    assert provider_choice.load_cached(path, ["cpu"]) is None  # OpenVINO no longer installed: measure again
    path.write_text("{not json")
    assert provider_choice.load_cached(path, ["cpu", "openvino"]) is None


def test_auto_with_one_engine_measures_nothing(monkeypatch):
    monkeypatch.setattr(openvino, "installed", lambda: False)
    losses, _, graph = _train("auto")
    assert graph._compiled.engine_choice is None and "ENGINE" not in repr(graph)
    assert losses == _train("cpu")[0]


def test_optimizer_step_is_lowered_without_a_shared_neg():
    _, _, graph = _train("cpu")
    model = graph._compiled.model
    lr_inputs = {v.name for v in model.graph.input if v.name.endswith("-LearningRate")}
    assert lr_inputs and not [n for n in model.graph.node if n.op_type == "Neg" and set(n.input) & lr_inputs]
    assert [n for n in model.graph.node if n.op_type == "Sub" and n.output[0].endswith(":new")]


@needs_runtime
def test_auto_measures_once_then_takes_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWSERVE_CACHE_DIR", str(tmp_path))
    expected = _train("cpu")[0]
    losses, _, graph = _train("auto")
    choice = graph._compiled.engine_choice
    assert choice is not None and not choice.cached and choice.engine in ("cpu", "openvino")
    assert set(choice.step_ms) | set(choice.dropped) == {"cpu", "openvino"}
    assert f"(ENGINE:{choice.engine} (measured" in repr(graph)
    np.testing.assert_allclose(losses, expected, rtol=1e-4)
    assert len(list((tmp_path / "engines").glob("*.json"))) == 1
    measure = provider_choice.measure
    monkeypatch.setattr(provider_choice, "measure", lambda *a, **k: pytest.fail("measured again"))
    again, _, graph = _train("auto")
    assert graph._compiled.engine_choice.cached and graph._compiled.engine == choice.engine
    np.testing.assert_allclose(again, expected, rtol=1e-4)
    monkeypatch.setattr(provider_choice, "measure", measure)


def _train_with_dropout():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 4))
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), provider="auto")
    x, y = data()
    return [float(graph(x, y).numpy()) for _ in range(4)], graph


@pytest.mark.parametrize("second", ["onnxruntime-again", pytest.param("openvino", marks=needs_runtime)])
def test_auto_draws_the_same_numbers_whether_it_measures_or_takes_the_cache(second, tmp_path, monkeypatch):
    """A graph with dropout under flow.manual_seed: the process that measures the engines
    and the one that takes its choice from the cache train alike. ("onnxruntime-again"
    runs the second candidate on ONNX Runtime's CPU provider, so the check needs no
    OpenVINO.)"""
    monkeypatch.setenv("FLOWSERVE_CACHE_DIR", str(tmp_path))
    if second == "onnxruntime-again":
        monkeypatch.setattr(openvino, "installed", lambda: True)
        options = CompiledGraph.engine_options
        monkeypatch.setattr(CompiledGraph, "engine_options", lambda self, name=None: options(
            self, "cpu" if (name or self.engine) == "openvino" else name))
    measured, graph = _train_with_dropout()
    assert graph._compiled.engine_choice is not None and not graph._compiled.engine_choice.cached
    cached, graph = _train_with_dropout()
    assert graph._compiled.engine_choice.cached
    assert cached == measured
    assert len(set(measured)) == 4  # fresh masks each step


@needs_runtime
def test_explicit_openvino_much_slower_than_onnx_runtime_warns_once(monkeypatch):
    monkeypatch.setattr(openvino, "plugin_devices", lambda: [])
    monkeypatch.setattr(provider_choice, "SLOWER", 1e-9)  # any time counts as "much slower"
    model = _model()
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), provider="openvino")
    x, y = _data()
    graph(x, y)
    with pytest.warns(UserWarning, match="'openvino' is 1e-09x slower than ONNX Runtime or more"):
        graph(x, y)
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        graph(x, y)
    assert not [w for w in later if "slower than ONNX Runtime" in str(w.message)]
    assert graph._compiled.engine_choice is not None
