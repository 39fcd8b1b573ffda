"""Export (and so serving) of a saved directory costs memory bounded by flowserve, not by
whatever a crafted ``graph.json`` or ``flowserve.json`` declares."""

from __future__ import annotations

import json
import tracemalloc

import pytest

import flowserve as flow
from flowserve.errors import ExportError, SavedGraphError
from flowserve.exporter import export
from tests.exporter.helpers import called_graph, mlp
from tests.exporter.test_saved_dir_robustness import _edit_graph

HUGE = [3000, 3000, 16]  # 144M float32 elements: 576 MB if ever computed


def _add_chain(ir, feeds_output: bool):
    ir["nodes"] += [
        {"op": "expand", "inputs": ["model.0.bias"], "outputs": ["big"], "attrs": {"shape": HUGE}},
        {"op": "relu", "inputs": ["big"], "outputs": ["big_relu"], "attrs": {}},
    ]
    ir["values"] += [{"name": n, "shape": HUGE, "dtype": "float32"} for n in ("big", "big_relu")]
    if feeds_output:
        ir["outputs"].append({"name": "big_relu", "shape": HUGE, "dtype": "float32"})


@pytest.fixture
def saved(tmp_path):
    directory = tmp_path / "mlp"
    flow.save(called_graph(mlp(), 2, 6), directory)
    return directory


def test_nodes_no_output_needs_are_never_run(saved):
    _edit_graph(saved, lambda ir: _add_chain(ir, feeds_output=False))
    tracemalloc.start()
    try:
        result = export(saved, target="onnxruntime")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, f"export allocated {peak / 2**20:.0f} MiB"
    assert "Relu" not in str([n.op_type for n in result.model.graph.node if "big" in n.output[0]])
    graph = flow.load(saved)
    assert all("big" not in out for node in graph.ir.nodes for out in node.outputs)


def test_a_huge_live_value_is_refused_before_the_parity_check_runs(saved, tmp_path):
    def edit(ir):
        _add_chain(ir, feeds_output=True)

    _edit_graph(saved, edit)
    manifest = json.loads((saved / "flowserve.json").read_text())
    manifest["outputs"].append({"name": "big_relu", "dtype": "float32", "shape": HUGE})
    (saved / "flowserve.json").write_text(json.dumps(manifest))
    tracemalloc.start()
    try:
        with pytest.raises(ExportError, match="value 'big.*parity check") as caught:
            export(saved, target="onnxruntime")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "\n" not in str(caught.value)
    assert peak < 100 * 2**20


def test_sample_inputs_are_bounded(saved):
    from flowserve.exporter.parity import sample_inputs
    from flowserve.format.manifest import TensorSpec

    with pytest.raises(ExportError, match="input 'x'.*exceeds"):
        sample_inputs([TensorSpec(name="x", dtype="float32", shape=[-1, 2**30])], 5, seed=0)
    with pytest.raises(SavedGraphError, match="flowserve.json.*shape"):
        manifest = json.loads((saved / "flowserve.json").read_text())
        manifest["inputs"][0]["shape"] = [-1, 60_000_000_000]
        (saved / "flowserve.json").write_text(json.dumps(manifest))
        export(saved)
