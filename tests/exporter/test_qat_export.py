"""A QAT graph saved with its learned scales exports to int8 without calibration, and the
int8 model gives the QAT graph's eval outputs within one quantization step."""

from __future__ import annotations

import collections
import json
import shutil

import numpy as np
import onnx
import onnx.inliner
import pytest

import flowserve as flow
from flowserve.errors import SavedGraphError
from flowserve.exporter import export
from flowserve.exporter.precision import reduce_precision
from flowserve.onnx_backend.runtime import create_session
from flowserve.exporter.verified import export_verified
from flowserve.format.manifest import read_manifest
from flowserve.format.tensors import read_tensors
from tests.ao.qat_models import TinyNet, images, labels
from tests.ao.test_qat_graph import TrainGraph


class EvalGraph(flow.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A QAT training graph after four steps, saved with held-out examples."""
    model = TinyNet()
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), {})
    for step in range(4):
        graph(images(seed=step), labels(seed=10 + step))
    folder = tmp_path_factory.mktemp("qat") / "tiny"
    flow.save(graph, folder, examples=[images(seed=100 + i) for i in range(3)])
    return model, folder


def test_saved_directory_records_the_learned_scales(trained):
    model, folder = trained
    record = read_manifest(folder).quantization
    params = read_tensors(folder / "params.safetensors")
    assert record is not None and len(record.tensors) >= 7
    weights = [t for t in record.tensors if t.axis is not None]
    assert weights and all((t.quant_min, t.quant_max) == (-64, 64) for t in weights)
    state = model.state_dict()
    for t in record.tensors:
        name = t.scale.split(".", 1)[1]  # graph attribute "model." + the module's state_dict key
        np.testing.assert_array_equal(params[t.scale], state[name].numpy())


def test_int8_export_needs_no_calibration_and_matches_the_qat_graph(trained, tmp_path):
    model, folder = trained
    result = export_verified(folder, tmp_path / "tiny.int8.onnx", precision="int8")
    assert result.proof.passed and result.path.is_file()
    ops = collections.Counter(n.op_type for n in result.model.graph.node)
    assert ops["QuantizeLinear"] >= 5 and ops["DequantizeLinear"] > ops["QuantizeLinear"]
    weights = [t for t in result.model.graph.initializer if "_quantized" in t.name]
    assert len(weights) == 4 and all(t.data_type == onnx.TensorProto.INT8 for t in weights)  # 3 convs, 1 linear
    session = create_session(result.model, device="cpu")
    model.eval()
    x = images(batch=16, seed=200)
    expected = EvalGraph(model)(x).numpy()
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    step = float(model.head.output_fake_quant.scale[0])
    np.testing.assert_allclose(got, expected, rtol=0, atol=step * (1 + 1e-3))


def test_reduce_precision_of_a_qdq_model_takes_no_calibration(trained):
    _, folder = trained
    model = export(folder, None, check=False).model
    quantized = reduce_precision(onnx.inliner.inline_local_functions(model), "int8", None)
    assert any(n.op_type == "DequantizeLinear" and n.input[0].endswith("_int32") for n in quantized.graph.node)


def test_a_record_naming_a_missing_tensor_is_refused(trained, tmp_path):
    _, folder = trained
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / "flowserve.json").read_text())
    manifest["quantization"]["tensors"][0]["scale"] = "model.nothing.scale"
    (copy / "flowserve.json").write_text(json.dumps(manifest))
    with pytest.raises(SavedGraphError, match="model.nothing.scale"):
        flow.load(copy)
