"""Acceptance: MobileNetV2, ResNet-18, the Transformer classifier and the MLP, trained a
few steps, saved with examples and exported at every CPU precision with ONNX Runtime's
tools; each export is proven on the examples and reported; a variant below the agreement
threshold is refused unless forced."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper
import pytest
from typer.testing import CliRunner

import flowserve.cli
from flowserve.errors import ExportError
from flowserve.exporter.verified import export_verified
from flowserve.format.verification import read_sidecar, sidecar_path
from flowserve.onnx_backend.providers import create_session
from flowserve.serialization import ExampleSet, read_examples
from flowserve.format.examples import ExampleBatch
from tests.deployments import MIN_AGREEMENT, MODELS, PRECISIONS, example_labels

OPS = {  # ops each precision's model must contain: what the ONNX Runtime tool produced
    "int8": {"QuantizeLinear", "DequantizeLinear"},
    "int8-dynamic": {"DynamicQuantizeLinear"},
}


@pytest.mark.parametrize("name", list(MODELS))
def test_every_precision_is_proven_and_reported(deployments, name):
    directory, exports = deployments[name]
    reference = _reference(directory)
    # real classifiers, so that top-1 agreement means something: better than chance on the
    # held-out examples, and not one class for every row
    assert np.mean(reference.argmax(1) == example_labels()) >= 0.5
    assert len(set(reference.argmax(1))) >= 3
    report = json.loads((directory / "reports" / "export.json").read_text())["exports"]
    assert set(report) == set(PRECISIONS)
    for precision, result in exports.items():
        entry = report[precision]
        assert entry["written"] and not entry["forced"], entry["note"]
        proof = entry["proof"]
        assert proof["passed"] and proof["top1_agreement"] >= MIN_AGREEMENT
        assert {r["batch"] for r in proof["records"]} == {8, 1}  # stored batches and one row at a time
        assert all(r["rows"] == 16 for r in proof["records"])
        spec, examples = read_sidecar(result.path)
        assert spec.precision == precision and examples.rows == 16
        if precision == "fp32":
            assert proof["max_abs_err"]["output_0"] <= 1e-4 * np.abs(reference).max()
            assert spec.criteria.rtol == 1e-4
        else:
            assert spec.criteria.min_agreement == MIN_AGREEMENT and spec.criteria.max_abs_err["output_0"] > 0


def _reference(directory):
    return np.concatenate([b.outputs["output_0"] for b in read_examples(directory).batches])


@pytest.mark.parametrize("name", list(MODELS))
def test_written_models_are_what_the_precision_says(deployments, name):
    _, exports = deployments[name]
    for precision, result in exports.items():
        model = onnx.load(str(result.path))
        ops = {n.op_type for n in model.graph.node}
        assert OPS.get(precision, set()) <= ops, (precision, sorted(ops))
        io = [v.type.tensor_type.elem_type for v in list(model.graph.input) + list(model.graph.output)]
        assert onnx.TensorProto.FLOAT16 not in io  # fp16 keeps float32 inputs and outputs
        if precision == "fp16":
            assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
        if precision == "int8":  # per-channel weights: a scale per output channel
            scales = [t for t in model.graph.initializer if t.name.endswith("_scale") and len(t.dims) == 1]
            assert any(t.dims[0] > 1 for t in scales)
        if precision.startswith("int8"):  # 7-bit weights: no U8S8 saturation on CPUs without VNNI
            weights = [numpy_helper.to_array(t) for t in model.graph.initializer
                       if t.data_type == onnx.TensorProto.INT8 and len(t.dims) > 1]
            assert weights and max(int(np.abs(w.astype(np.int16)).max()) for w in weights) <= 64, precision


@pytest.mark.parametrize("precision", ["int8", "int8-dynamic", "fp16"])
def test_reduced_precision_agrees_with_float32_on_the_examples(deployments, precision):
    directory, exports = deployments["resnet18"]
    reference = _reference(directory)
    examples = read_examples(directory)
    session = create_session(str(exports[precision].path), device="cpu")
    got = np.concatenate([session.run(None, b.inputs)[0] for b in examples.batches])
    assert np.mean(got.argmax(1) == reference.argmax(1)) >= 0.99
    assert 0 < np.abs(got - reference).max() < 0.1 * np.abs(reference).max()


def test_int8_below_the_threshold_is_refused_unless_forced(deployments, tmp_path):
    directory, _ = deployments["mlp"]
    examples = read_examples(directory)
    # calibrated on inputs 1000 times too small, the activations saturate
    tiny = ExampleSet([ExampleBatch({k: v * 1e-3 for k, v in b.inputs.items()}, b.outputs)
                       for b in examples.batches], examples.rtol)
    path = tmp_path / "refused.onnx"
    with pytest.raises(ExportError, match=r"int8 export refused: .*top-1 agreement .* < 99\.00%.*--force"):
        export_verified(directory, path, precision="int8", calibration=tiny)
    assert not path.exists() and not sidecar_path(path).exists()
    entry = json.loads((directory / "reports" / "export.json").read_text())["exports"]["int8"]
    assert not entry["written"] and "refused" in entry["note"]
    forced = export_verified(directory, path, precision="int8", calibration=tiny, force=True)
    assert path.exists() and forced.forced and forced.proof.agreement() < 0.99
    spec, _ = read_sidecar(path)
    assert spec.forced and spec.criteria.min_agreement == forced.proof.agreement()
    # put the good int8 export back in the report for the other tests
    export_verified(directory, tmp_path / "good.onnx", precision="int8")


def test_cli_prints_the_proof_table_and_refuses_bf16_on_cpu(deployments, tmp_path):
    directory, _ = deployments["transformer"]
    runner = CliRunner()
    flowserve.cli._register()
    out = tmp_path / "t.onnx"
    done = runner.invoke(flowserve.cli.app, ["export", str(directory), "-o", str(out), "--precision", "fp16"])
    assert done.exit_code == 0, done.output
    assert "proof on the stored examples (fp16; top-1 agreement >= 99.0%)" in done.output
    assert "fp16 matches its examples" in done.output and out.exists()
    done = runner.invoke(flowserve.cli.app, ["export", str(directory), "--precision", "bf16"])
    assert done.exit_code == 2
    assert done.output.strip().splitlines() == [
        "error: precision bf16 needs a CUDA GPU (ONNX Runtime has no bfloat16 kernels for these ops on CPU) "
        "and none is usable here; use fp16 or int8 on CPU"]


def test_reduced_precision_without_examples_is_refused(tmp_path):
    import flowserve as flow
    from tests.deployments import TrainGraph
    from tests.exporter.helpers import mlp

    graph = TrainGraph(mlp(), 0.01)  # a training graph stores no examples unless given
    graph(flow.randn(4, 6), flow.tensor(np.arange(4) % 3))
    flow.save(graph, tmp_path / "d")
    with pytest.raises(ExportError, match="int8-dynamic is checked on the saved directory's examples and .* has "
                                          "none.*--force"):
        export_verified(tmp_path / "d", tmp_path / "m.onnx", precision="int8-dynamic")
    assert not (tmp_path / "m.onnx").exists()
    assert export_verified(tmp_path / "d", tmp_path / "m.onnx", precision="int8-dynamic", force=True).forced


def _saved_mlp(directory):
    """An inference MLP called on two real batches, saved with them as its examples."""
    import flowserve as flow
    from tests.exporter.helpers import InferenceGraph, mlp

    graph = InferenceGraph(mlp(3).eval())
    for seed in (0, 1):
        graph(flow.tensor(np.random.default_rng(seed).standard_normal((4, 6)).astype(np.float32)))
    flow.save(graph, directory)
    return directory


def test_every_target_keeps_its_own_proof_in_the_report(tmp_path):
    directory = _saved_mlp(tmp_path / "d")
    export_verified(directory, tmp_path / "p.onnx", target="portable")
    export_verified(directory, tmp_path / "o.onnx", target="onnxruntime")
    entry = json.loads((directory / "reports" / "export.json").read_text())["exports"]["fp32"]
    assert entry["target"] == "onnxruntime" and entry["path"] == str(tmp_path / "o.onnx")  # the latest
    assert set(entry["targets"]) == {"portable", "onnxruntime"}
    for target, name in (("portable", "p.onnx"), ("onnxruntime", "o.onnx")):
        proven = entry["targets"][target]
        assert proven["path"] == str(tmp_path / name) and proven["export"]["target"] == target
        assert proven["proof"]["passed"] and {r["batch"] for r in proven["proof"]["records"]} == {4, 1}


def test_cli_target_all_writes_and_proves_every_target(tmp_path):
    directory = _saved_mlp(tmp_path / "d")
    runner = CliRunner()
    flowserve.cli._register()
    done = runner.invoke(flowserve.cli.app, ["export", str(directory), "-o", str(tmp_path / "m.onnx"),
                                             "--target", "all"])
    assert done.exit_code == 0, done.output
    written = [tmp_path / "m.onnx", tmp_path / "m.onnxruntime.onnx"]
    assert [line for line in done.output.splitlines() if line.startswith("wrote")] == [f"wrote {p}" for p in written]
    assert done.output.count("fp32 matches its examples") == 2
    for path, target in zip(written, ("portable", "onnxruntime")):
        spec, examples = read_sidecar(path)
        assert spec.model == path.name and examples.rows == 8
        session = create_session(str(path), device="cpu")  # the written file reproduces the examples
        for batch in examples.batches:
            np.testing.assert_allclose(session.run(None, batch.inputs)[0], batch.outputs["output_0"], rtol=1e-4,
                                       atol=1e-5)
        domains = {n.domain for n in onnx.load(str(path)).graph.node}
        assert ("com.microsoft" in domains) == (target == "onnxruntime")
    report = json.loads((directory / "reports" / "export.json").read_text())["exports"]["fp32"]
    assert {t: e["proof"]["passed"] for t, e in report["targets"].items()} == {"portable": True, "onnxruntime": True}
    done = runner.invoke(flowserve.cli.app, ["export", str(directory), "--target", "all", "--precision", "int8"])
    assert done.exit_code == 2 and "--target all exports float32 at every target (portable, onnxruntime); " \
                                   "--precision int8 is made from one float32 export" in done.output
