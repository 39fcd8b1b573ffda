"""``flowserve.exporter.export``: sources, targets, report, parity check, CLI."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

import flowserve as flow
from flowserve.errors import ExportError, GraphError
from flowserve.exporter import export
from flowserve.exporter.parity import check_parity
from flowserve.onnx_backend.providers import create_session
from tests.exporter.helpers import InferenceGraph, assert_close, called_graph, mlp


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = mlp()
    directory = tmp_path_factory.mktemp("saved") / "mlp"
    flow.save(called_graph(model, 3, 6), directory)
    return directory, model


@pytest.mark.parametrize("target", ["portable", "onnxruntime"])
def test_export_dir_runs_in_onnxruntime_at_any_batch(saved, tmp_path, target):
    directory, model = saved
    result = export(directory, tmp_path / "m.onnx", target=target)
    assert result.path.is_file() and onnx.load(str(result.path)).graph.node
    session = create_session(str(result.path), device="cpu")
    for batch in (1, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 6)).astype(np.float32)
        assert_close(session.run(None, {session.get_inputs()[0].name: x})[0], model(flow.tensor(x)).numpy())
    report = result.report
    assert report.fused_counts() == {"Gemm": 3}
    assert "gemm" in report.passes and report.to_json()["passes"] == report.passes
    assert report.nodes_before > report.nodes_after == 3
    assert sorted({p.batch for p in report.parity}) == [2, 5]


def test_signature_has_named_dynamic_batch(saved):
    result = export(saved[0])
    (x,) = result.model.graph.input
    dims = x.type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == 6 and x.type.tensor_type.elem_type == 1
    assert [o.name for o in result.model.graph.output] == ["output_0"]
    assert result.path is None


def test_portable_functions_are_flowserve_domain(saved):
    model = export(saved[0], target="portable").model
    assert {f.domain for f in model.functions} == {"flowserve"}
    assert {n.domain for n in model.graph.node} <= {"", "flowserve"}


def test_export_graph_and_loaded_graph_agree(saved):
    directory, model = saved
    from_graph = export(called_graph(model, 3, 6)).model
    from_loaded = export(flow.load(directory)).model
    assert from_graph.graph.node == from_loaded.graph.node


def test_uncalled_graph_is_refused():
    with pytest.raises(GraphError, match="compiled first"):
        export(InferenceGraph(mlp()))


def test_unfused_export_keeps_every_node(saved):
    result = export(saved[0], fuse=False)
    report = result.report
    assert not report.fused and report.nodes_after == report.nodes_before - report.folded == 8


def test_parity_check_names_the_diverging_output(saved):
    directory, _ = saved
    from flowserve.serialization import read_graph_dir

    manifest, ir, params = read_graph_dir(directory)
    good = export(directory).model
    wrong = {k: v + 0.01 if v.ndim == 1 else v for k, v in params.items()}
    with pytest.raises(ExportError, match="output 'output_0' diverges"):
        check_parity(create_session(good, device="cpu"), ir, wrong, manifest.inputs, [2])


@pytest.mark.parametrize("bad,match", [({"target": "tensorrt"}, "target must be one of"),
                                       ({"opset": 12}, "opset must be one of")])
def test_bad_options(saved, bad, match):
    with pytest.raises(ExportError, match=match):
        export(saved[0], **bad)


def _cli(*args):
    from flowserve.cli import _register, app

    _register()
    return CliRunner().invoke(app, list(args))


def test_cli_export_and_inspect(saved, tmp_path):
    directory, _ = saved
    out = tmp_path / "cli.onnx"
    done = _cli("export", str(directory), "-o", str(out), "--target", "onnxruntime")
    assert done.exit_code == 0, done.output
    assert out.is_file() and "fused Gemm" in done.output
    table = _cli("inspect", str(directory))
    assert table.exit_code == 0 and "parameters: 435" in table.output and "Gemm" in table.output
    info = json.loads(_cli("inspect", str(directory), "--json").output)
    assert info["parameters"] == 435 and info["ops"]["matmul"] == 3 and len(info["fused"]) == 3


def test_cli_errors_are_one_line_exit_2(tmp_path):
    done = _cli("export", str(tmp_path / "missing"))
    assert done.exit_code == 2 and "missing" in done.output and "Traceback" not in done.output
    assert len(done.output.strip().splitlines()) == 1


def test_large_models_get_external_data(saved, tmp_path, monkeypatch):
    from flowserve.exporter import writing

    monkeypatch.setattr(writing, "EXTERNAL_DATA_THRESHOLD", 1000)
    result = export(saved[0], tmp_path / "big.onnx", target="onnxruntime")
    assert result.report.external_data == "big.onnx.data" and (tmp_path / "big.onnx.data").is_file()
    stored = onnx.load(str(tmp_path / "big.onnx"), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in stored.graph.initializer)
    session = create_session(str(tmp_path / "big.onnx"), device="cpu")
    x = {session.get_inputs()[0].name: np.ones((4, 6), np.float32)}
    assert session.run(None, x)[0].shape == (4, 3)
