"""One pass convention for the core's IR passes and the exporter's: each returns
``PassResult(graph, modified)``; one dead-code elimination; no ONNX op built in the core;
the IR copies itself without a JSON round trip."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np

import flowserve
from flowserve.exporter.passes import EXPORT_PASSES, ExportGraph, run_passes
from flowserve.ir.graph import GraphIR, Node, PassResult, Value
from flowserve.ir.passes import eliminate_dead_code
from flowserve.ir.passes.amp import amp_cast
from flowserve.ir.passes.fuse_add_to_output import fuse_add_to_output
from flowserve.ir.passes.fuse_cast_scale import fuse_cast_scale

PACKAGE = Path(flowserve.__file__).parent


def linear_ir() -> tuple[GraphIR, dict]:
    """y = relu(x @ w + b), with an unused parameter ``spare``."""
    ir = GraphIR("linear")
    for name, shape in (("x", (-1, 3)), ("w", (3, 2)), ("b", (2,)), ("spare", (4,)), ("xw", (-1, 2)),
                        ("z", (-1, 2)), ("y", (-1, 2))):
        ir.add_value(Value(name, shape, "float32"))
    ir.inputs, ir.outputs = [ir.values["x"]], [ir.values["y"]]
    for name in ("w", "b", "spare"):
        ir.state[name], ir.state_kinds[name] = ir.values[name], "parameter"
    ir.nodes = [Node("matmul", ["x", "w"], ["xw"]), Node("add", ["xw", "b"], ["z"]), Node("relu", ["z"], ["y"])]
    ir.attrs["note"] = {"nested": [1, 2]}
    arrays = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32), "spare": np.ones(4, np.float32)}
    return ir, arrays


def test_core_passes_return_pass_results():
    for run in (eliminate_dead_code, fuse_cast_scale, fuse_add_to_output, lambda ir: amp_cast(ir, "float16")):
        ir, _ = linear_ir()
        result = run(ir)
        assert isinstance(result, PassResult) and result.ir is ir and isinstance(result.modified, bool)
    ir, _ = linear_ir()
    assert fuse_add_to_output(ir).modified and [n.op for n in ir.nodes] == ["fused.AddToOutput", "relu"]
    assert not fuse_add_to_output(ir).modified


def test_exporter_passes_return_pass_results_and_prune_with_the_core_dce():
    ir, arrays = linear_ir()
    g = ExportGraph.of(ir, arrays)
    g.refresh()
    results = {p.name: p.run(g, True) for p in EXPORT_PASSES.passes}
    assert all(isinstance(r, PassResult) and r.ir is g for r in results.values())
    assert results["gemm"].modified and not results["layernorm"].modified
    g.prune()
    assert "spare" not in g.ir.state and "spare" not in g.consts and "spare" in ir.state
    ran = run_passes(ExportGraph.of(ir, arrays))
    assert [n.op for n in ran.ir.nodes] == [n.op for n in g.ir.nodes]
    assert ran.applied == [name for name, r in results.items() if r.modified]  # what run_passes records
    unfused = run_passes(ExportGraph.of(ir, arrays), fuse=False)
    assert "gemm" not in unfused.applied and not unfused.groups


def test_ir_copy_is_independent_and_equal():
    ir, _ = linear_ir()
    copy = ir.copy()
    assert copy.to_json() == ir.to_json()
    assert copy.inputs[0] is copy.values["x"] and copy.state["w"] is copy.values["w"]
    copy.nodes[0].inputs[0] = "changed"
    copy.values["x"].shape = (5, 3)
    copy.attrs["note"]["nested"].append(3)
    copy.state_kinds["w"] = "buffer"
    assert ir.nodes[0].inputs[0] == "x" and ir.values["x"].shape == (-1, 3)
    assert ir.attrs["note"] == {"nested": [1, 2]} and ir.state_kinds["w"] == "parameter"


def test_no_core_pass_builds_onnx_and_no_second_dce():
    for path in sorted((PACKAGE / "ir").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "b.op(" not in text and '"Gemm"' not in text, path
    source = inspect.getsource(ExportGraph.prune)
    assert "eliminate_dead_code" in source and "reversed(" not in source
