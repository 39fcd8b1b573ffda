"""How a graph runs (``flowserve.nn.graph.lifecycle``): a pure trace that carries its batch
marks, one pass list, executors behind one interface, and ``flow.save`` writing what the
traces hold (an inference graph's ``build()`` never runs again; a training graph's model
runs once, in eval mode)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.distributed.stages import ATTR as STAGES_ATTR
from flowserve.ir.graph import GraphIR, Node, PassResult, Value
from flowserve.ir.passes import eliminate_dead_code
from flowserve.ir.passes.manager import Pass, PassManager
from flowserve.nn.graph.executor import EXECUTOR_KINDS, Executor, choose_executor
from flowserve.nn.graph.passes import GRAPH_PASSES, PassContext
from flowserve.nn.graph.lifecycle import trace_and_rewrite
from flowserve.nn.graph.trace import BatchMarks, trace_build


class Counted(nn.Module):
    """A small conv-free model that counts its forward calls."""

    def __init__(self):
        super().__init__()
        flow.manual_seed(0)
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        b = x.shape[0]
        h = self.fc1(x).relu().view(b, 2, 4).reshape(b, -1)  # the batch read from the input: kept as a mark
        return self.fc2(h)


class CountedInfer(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.builds = 0

    def build(self, x):
        self.builds += 1
        return self.model(x)


class CountedTrain(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def _x(batch: int = 4) -> flow.Tensor:
    return flow.tensor(np.random.default_rng(batch).standard_normal((batch, 6)).astype(np.float32))


def _manifest(path) -> dict:
    return json.loads((path / "flowserve.json").read_text())


def test_saving_a_called_inference_graph_runs_build_zero_times(tmp_path):
    model = Counted().eval()
    graph = CountedInfer(model)
    x = _x()
    graph(x)
    builds, calls = graph.builds, model.calls
    assert (builds, calls) == (1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "runs at batch size 4 only"
        flow.save(graph, tmp_path / "g")
    assert (graph.builds, model.calls) == (builds, calls)
    manifest = _manifest(tmp_path / "g")
    assert manifest["inputs"][0]["shape"] == [-1, 6] and manifest["outputs"][0]["shape"] == [-1, 3]
    assert manifest["batch_note"] is None
    loaded = flow.load(tmp_path / "g")
    for batch in (1, 7):
        z = _x(batch)
        np.testing.assert_allclose(loaded(z).numpy(), model(z).numpy(), rtol=1e-5, atol=1e-6)
    graph.deployable_state()  # export reads the same state: still no build()
    assert graph.builds == builds


def test_saving_a_training_graph_runs_its_model_once_in_eval_mode(tmp_path):
    model = Counted()
    graph = CountedTrain(model)
    x, y = _x(), flow.tensor(np.array([0, 1, 2, 1], np.int64))
    graph(x, y)
    graph(x, y)
    before = model.calls
    flow.save(graph, tmp_path / "g")
    assert model.calls == before + 1
    assert model.training  # the eval trace gives the modules their mode back
    manifest = _manifest(tmp_path / "g")
    assert manifest["training"] and manifest["inputs"][0]["shape"] == [-1, 6]
    z = _x(5)
    np.testing.assert_allclose(flow.load(tmp_path / "g")(z).numpy(), model.eval()(z).numpy(), rtol=1e-5, atol=1e-6)


class _MeanOverBatch(nn.Module):
    def forward(self, x):
        return x - x.sum(0) / int(x.shape[0])  # the batch size as a plain number


def test_a_plain_number_for_the_batch_is_reported_fixed_without_tracing_again(tmp_path):
    graph = CountedInfer(_MeanOverBatch())
    graph(_x())
    with pytest.warns(UserWarning, match=r"runs at batch size 4 only.*'div'.*test_graph_lifecycle.py.*reduced over the batch"):
        flow.save(graph, tmp_path / "g")
    assert graph.builds == 1
    assert _manifest(tmp_path / "g")["inputs"][0]["shape"] == [4, 6]


def test_a_batch_written_out_is_named_by_the_marks(tmp_path):
    class Written(nn.Module):
        def forward(self, x):
            return x + flow.ones(4, 1)  # a tensor of the batch size made with the size written out

    graph = CountedInfer(Written())
    graph(_x())
    deployed = graph.deployable_state()
    assert deployed.batch is None
    assert "fixed by op 'add'" in deployed.batch_note and "test_graph_lifecycle.py" in deployed.batch_note
    assert graph.builds == 1


def test_the_trace_is_a_value_with_its_batch_marks():
    graph = CountedInfer(Counted().eval())
    traced = trace_build(graph, (_x(),), {})
    assert not graph.is_compiled and graph.parts.last is None  # the graph is unchanged
    assert traced.batch_marks == BatchMarks(4, {"x": (0,)}, {traced.ir.outputs[0].name: (0,)})
    assert traced.batch_marks.batched_inputs
    assert set(traced.state) == set(traced.ir.state)


def test_graph_passes_are_one_checked_list():
    assert GRAPH_PASSES.names == ["activation_checkpointing", "conv_weight_grad_as_matmul",
                                  "fold_clamp_gradient_masks", "amp", "fuse_cast_scale", "stages", "zero", "dce"]
    with pytest.raises(ValueError, match="pass 'fuse' requires amp_casts, which no earlier pass ensures"):
        PassManager([Pass("fuse", lambda ir, ctx: PassResult(ir, False), requires=("amp_casts",)),
                     Pass("amp", lambda ir, ctx: PassResult(ir, True), ensures=("amp_casts",))])
    with pytest.raises(TypeError, match="pass 'bad' returned bool"):
        PassManager([Pass("bad", lambda ir, ctx: True)]).run(GraphIR("g"), None)


def test_the_pass_list_reports_what_changed_the_ir():
    ir = GraphIR("g")
    for name in ("x", "y", "unused"):
        ir.add_value(Value(name, (2,), "float32"))
    ir.inputs, ir.outputs = [ir.values["x"]], [ir.values["y"]]
    ir.nodes = [Node("relu", ["x"], ["y"]), Node("neg", ["x"], ["unused"])]
    manager = PassManager([Pass("amp", lambda ir, ctx: PassResult(ir, False), when=lambda ctx: ctx.options.get("amp")),
                           Pass("dce", lambda ir, ctx: eliminate_dead_code(ir), reported=False),
                           Pass("named", lambda ir, ctx: PassResult(ir, True), label=lambda ctx: "named(x)")])
    result, applied = manager.run(ir, PassContext({"amp": False}))
    assert result.modified and result.ir is ir and applied == ["named(x)"]
    assert [n.op for n in ir.nodes] == ["relu"]


def test_executors_are_chosen_by_what_the_ir_holds():
    assert [kind.name for kind in EXECUTOR_KINDS] == ["pipeline", "segmented", "single"]
    graph = CountedInfer(Counted().eval())
    graph(_x())
    executor = graph.parts.last
    assert isinstance(executor, Executor) and executor.state is executor.traced.state
    assert executor.describe().startswith("single session (inference, batch 4, dynamic")
    traced = trace_and_rewrite(CountedInfer(Counted().eval()), (_x(),), {})
    assert choose_executor(traced).name == "single"
    traced.ir.nodes.append(Node("all_reduce", [traced.ir.outputs[0].name], ["reduced"]))
    assert choose_executor(traced).name == "segmented"
    traced.ir.attrs[STAGES_ATTR] = {}
    assert choose_executor(traced).name == "pipeline"


def test_an_output_with_the_batch_merged_is_fixed_by_the_marks():
    class Merged(nn.Module):
        def forward(self, x):
            B, C = x.shape
            return x.view(B * 2, C // 2)

    graph = CountedInfer(Merged())
    graph(_x(2))
    deployed = graph.deployable_state()
    assert deployed.batch is None and graph.builds == 1
    assert "output 0 has dim 0 of size 4 at batch size 2 and 6 at 3" in deployed.batch_note
    assert "view(B, T, C)" in deployed.batch_note
