"""Reference examples in saved directories: every way of giving them, what is stored, and
that a changed or malformed example is refused like a changed weight."""

from __future__ import annotations

import json

import numpy as np
import pytest

import flowserve as flow
from flowserve.errors import SavedGraphError
from flowserve.exporter.cli import describe, format_table
from flowserve.serialization import read_examples
from tests.exporter.helpers import InferenceGraph, assert_close, mlp


@pytest.fixture
def graph():
    g = InferenceGraph(mlp())
    for seed in range(6):
        g(flow.tensor(np.random.default_rng(seed).standard_normal((seed + 1, 6)).astype(np.float32)))
    return g


def _eager(graph, x):
    with flow.no_grad():
        return graph.model.to(flow.nn.Module)(flow.tensor(x)).numpy()


def test_inference_graph_stores_its_last_calls_by_default(graph, tmp_path):
    flow.save(graph, tmp_path / "d")
    examples = read_examples(tmp_path / "d")
    assert examples.provenance["source"] == "last_calls"
    assert [b.rows for b in examples.batches] == [3, 4, 5, 6]  # the last four calls, in order
    for batch in examples.batches:
        (x,) = batch.inputs.values()
        (y,) = batch.outputs.values()
        assert_close(y, _eager(graph, x))
    manifest = json.loads((tmp_path / "d" / "flowserve.json").read_text())
    assert sorted(manifest["examples"]) == [f"examples/batch_00{i}.safetensors" for i in range(4)] + [
        "examples/examples.json"]
    assert {p.suffix for p in (tmp_path / "d" / "examples").iterdir()} == {".json", ".safetensors"}


def test_examples_from_tensors_lists_and_dataloaders(graph, tmp_path):
    x = np.random.default_rng(7).standard_normal((5, 6)).astype(np.float32)
    flow.save(graph, tmp_path / "one", examples=flow.tensor(x), tolerance=1e-3)
    one = read_examples(tmp_path / "one")
    assert (one.rows, one.rtol, one.provenance["source"]) == (5, 1e-3, "tensors")
    (stored,) = one.batches[0].inputs.values()
    np.testing.assert_array_equal(stored, x)
    flow.save(graph, tmp_path / "list", examples=[x[:2], (x[2:],)])
    assert [b.rows for b in read_examples(tmp_path / "list").batches] == [2, 3]
    dataset = flow.utils.data.TensorDataset(flow.tensor(np.tile(x, (4, 1))), flow.arange(20))
    flow.save(graph, tmp_path / "loader", examples=flow.utils.data.DataLoader(dataset, batch_size=3))
    loaded = read_examples(tmp_path / "loader")
    assert [b.rows for b in loaded.batches] == [3, 3, 3, 3]  # at most four batches; labels dropped
    assert loaded.provenance["source"] == "dataloader" and loaded.provenance["batch_size"] == 3
    assert_close(loaded.batches[1].outputs[loaded.output_names[0]], _eager(graph, np.tile(x, (4, 1))[3:6]))


def test_training_graph_needs_explicit_examples(tmp_path):
    model = mlp()
    graph = _TrainGraph(model)
    graph(flow.randn(4, 6), flow.tensor(np.arange(4) % 3))
    flow.save(graph, tmp_path / "none")
    assert read_examples(tmp_path / "none") is None
    with pytest.raises(ValueError, match="examples='last' needs an inference graph"):
        flow.save(graph, tmp_path / "last", examples="last")
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    flow.save(graph, tmp_path / "given", examples=[(x, np.arange(4))])
    model.eval()
    given = read_examples(tmp_path / "given")
    assert_close(next(iter(given.batches[0].outputs.values())), model(flow.tensor(x)).numpy())


class _TrainGraph(flow.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss = flow.nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

    def build(self, x, y):
        loss = self.loss(self.model(x), y)
        loss.backward()
        return loss


def test_bad_examples_are_refused_with_the_input_named(graph, tmp_path):
    with pytest.raises(ValueError, match=r"example batch 0, input '\w+': shape \(2, 5\)"):
        flow.save(graph, tmp_path / "d", examples=np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="dtype int64"):
        flow.save(graph, tmp_path / "d", examples=np.zeros((2, 6), np.int64))
    with pytest.raises(TypeError, match="examples must be"):
        flow.save(graph, tmp_path / "d", examples=3)
    with pytest.raises(TypeError, match="apply to an nn.Graph"):
        flow.save({"w": flow.randn(2)}, tmp_path / "s.safetensors", examples=np.zeros(2))
    assert not (tmp_path / "d").exists()  # nothing written


def test_changed_example_is_refused(graph, tmp_path):
    flow.save(graph, tmp_path / "d")
    path = tmp_path / "d" / "examples" / "batch_001.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(SavedGraphError, match="batch_001.safetensors: checksum mismatch"):
        read_examples(tmp_path / "d")
    (tmp_path / "d" / "examples" / "examples.json").unlink()
    with pytest.raises(SavedGraphError, match="examples.json: missing"):
        read_examples(tmp_path / "d")


def test_manifest_example_names_must_stay_in_examples(graph, tmp_path):
    flow.save(graph, tmp_path / "d")
    path = tmp_path / "d" / "flowserve.json"
    manifest = json.loads(path.read_text())
    manifest["examples"]["examples/../params.safetensors"] = "0" * 64
    path.write_text(json.dumps(manifest))
    with pytest.raises(SavedGraphError, match="example files are named examples/<file name>"):
        read_examples(tmp_path / "d")


def test_inspect_shows_the_examples(graph, tmp_path):
    flow.save(graph, tmp_path / "d")
    info = describe(tmp_path / "d")
    assert info["examples"]["rows"] == 18 and info["examples"]["provenance"]["source"] == "last_calls"
    text = format_table(info)
    assert "examples: 4 batch(es), 18 row(s)" in text and "made from last_calls" in text
    assert "examples/batch_000.safetensors" in text


def test_last_calls_keep_at_most_64_rows(tmp_path):
    graph = InferenceGraph(mlp())
    for rows in (50, 40, 30):
        graph(flow.randn(rows, 6))
    flow.save(graph, tmp_path / "d")
    assert [b.rows for b in read_examples(tmp_path / "d").batches] == [34, 30]  # newest first kept
