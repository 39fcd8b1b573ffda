"""Named dynamic dims shared between inputs: a graph network's node count in ``x (N, 16)``
and ``adj (N, N)``, saved at N = 12 with ``dynamic_dims``, runs at N = 7 and N = 20 loaded,
exported and served, equal to eager and PyTorch; inputs that disagree on N are refused
naming both; a graph that bakes N in is refused at save time naming the op."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import flowserve as flow
from flowserve.clients import HTTPClient
from flowserve.clients.errors import InferenceServerError
from flowserve.errors import GraphError, ShapeError
from flowserve.exporter import export
from flowserve.server import InferenceServer, ServerSettings

NODES = {"x": {0: "nodes"}, "adj": {0: "nodes", 1: "nodes"}}


def _gcn(lib):
    class GCN(lib.nn.Module):
        """Two graph convolutions: ``adj @ (x W)``."""

        def __init__(self):
            super().__init__()
            self.w1, self.w2 = lib.nn.Linear(16, 8), lib.nn.Linear(8, 4)

        def forward(self, x, adj):
            return adj @ self.w2((adj @ self.w1(x)).relu())

    return GCN


class _Graph(flow.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x, adj):
        return self.model(x, adj)


def _inputs(nodes, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((nodes, 16)).astype(np.float32), (rng.random((nodes, nodes)) < 0.3).astype(np.float32)


def _close(got, ref):
    got, ref = np.asarray(got), np.asarray(ref)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    flow.manual_seed(0)
    mine, theirs = _gcn(flow)(), _gcn(torch)()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in mine.state_dict().items()})
    graph = _Graph(mine)
    graph(*map(flow.tensor, _inputs(12, 0)))
    path = tmp_path_factory.mktemp("gcn") / "gcn"
    flow.save(graph, path, dynamic_dims=NODES)
    return path, mine, theirs


def test_manifest_names_the_dims(saved):
    path, _, _ = saved
    manifest = json.loads((path / "flowserve.json").read_text())
    assert manifest["dynamic_dims"] == {"x": {"0": "nodes"}, "adj": {"0": "nodes", "1": "nodes"},
                                        "output_0": {"0": "nodes"}}
    assert [s["shape"] for s in manifest["inputs"]] == [[-1, 16], [-1, -1]]
    assert manifest["outputs"][0]["shape"] == [-1, 4] and manifest["format_version"] == 3


def test_loaded_and_exported_run_at_other_node_counts(saved, tmp_path):
    path, mine, theirs = saved
    loaded = flow.load(path)
    export(path, tmp_path / "gcn.onnx")
    model = onnx.load(str(tmp_path / "gcn.onnx"))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert dims == {"x": ["nodes", 16], "adj": ["nodes", "nodes"]}
    session = ort.InferenceSession(str(tmp_path / "gcn.onnx"), providers=["CPUExecutionProvider"])
    for nodes in (7, 20):
        x, adj = _inputs(nodes, nodes)
        ref = theirs(torch.from_numpy(x), torch.from_numpy(adj)).detach().numpy()
        _close(mine(flow.tensor(x), flow.tensor(adj)).numpy(), ref)
        _close(loaded(x, adj).numpy(), ref)
        _close(session.run(None, {"x": x, "adj": adj})[0], ref)
    with pytest.raises(ShapeError, match=r"dim 'nodes' is 7 in input 'x' \(dim 0\) but 8 in input 'adj' \(dim 0\)"):
        loaded(_inputs(7, 0)[0], _inputs(8, 0)[1])


def test_served_at_other_node_counts_and_mismatch_is_a_400(saved):
    path, _, theirs = saved
    settings = ServerSettings(model_path=str(path), host="127.0.0.1", http_port=0, grpc_port=0, log_level="warning")
    with InferenceServer(settings).background() as server:
        client = HTTPClient(server.http_url)
        name = client.repository_index()[0]["name"]
        for nodes in (7, 20):
            x, adj = _inputs(nodes, nodes)
            (got,) = client.infer(name, {"x": x, "adj": adj}).values()
            _close(got, theirs(torch.from_numpy(x), torch.from_numpy(adj)).detach().numpy())
        with pytest.raises(InferenceServerError) as info:
            client.infer(name, {"x": _inputs(7, 0)[0], "adj": _inputs(8, 0)[1]})
        assert info.value.status == 400
        assert "'x'" in str(info.value) and "'adj'" in str(info.value) and "'nodes'" in str(info.value)


def test_old_manifests_without_dynamic_dims_still_load(saved, tmp_path):
    import hashlib
    import shutil

    path, mine, _ = saved
    old = shutil.copytree(path, tmp_path / "old")
    manifest = json.loads((old / "flowserve.json").read_text())
    del manifest["dynamic_dims"]
    manifest["format_version"] = 2
    manifest["inputs"] = [{**s, "shape": [12, 16] if s["name"] == "x" else [12, 12]} for s in manifest["inputs"]]
    manifest["outputs"][0]["shape"] = [12, 4]
    (old / "flowserve.json").write_text(json.dumps(manifest))
    assert hashlib.sha256((old / "graph.json").read_bytes()).hexdigest() == manifest["files"]["graph.json"]
    x, adj = _inputs(12, 3)
    _close(flow.load(old)(x, adj).numpy(), mine(flow.tensor(x), flow.tensor(adj)).numpy())


def test_a_graph_that_bakes_the_dim_is_refused_naming_the_op(tmp_path):
    class Pooled(flow.nn.Module):
        def forward(self, x, adj):
            return (adj @ x).reshape(1, 12 * 16)  # the node count written out

    graph = _Graph(Pooled())
    graph(*map(flow.tensor, _inputs(12, 0)))
    with pytest.raises(GraphError, match=r"dynamic_dims: the size of 'nodes' is fixed.*op 'reshape'.*test_graph_named_dims.py"):
        flow.save(graph, tmp_path / "g", dynamic_dims=NODES)
    with pytest.raises(GraphError, match=r"different sizes in the traced inputs"):
        flow.save(graph, tmp_path / "g", dynamic_dims={"x": {1: "nodes"}, "adj": {0: "nodes"}})


def test_a_lowering_that_fixes_a_named_dim_is_caught_at_save_time(tmp_path):
    class Image(flow.nn.Graph):  # float64 convolutions are lowered with their traced output size
        def __init__(self):
            super().__init__()
            self.conv = flow.nn.Conv2d(3, 4, 3, padding=1).double()

        def build(self, x):
            return self.conv(x)

    graph = Image()
    graph(flow.randn(1, 3, 8, 10).double())
    with pytest.raises(GraphError, match=r"dynamic_dims: the lowered graph (does not run|gives output 'output_0' of size \(1, 4, 8, 10\) where build\(\) gives \(1, 4, 9, 11\)).*'h', 'w'"):
        flow.save(graph, tmp_path / "g", dynamic_dims={"x": {2: "h", 3: "w"}})
    flow.save(graph, tmp_path / "g", dynamic_dims={"x": {0: "images"}})  # the batch as a named dim
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 10))
    _close(flow.load(tmp_path / "g")(x).numpy(), graph.conv(flow.tensor(x)).numpy())


def test_a_manifest_naming_a_fixed_dim_is_refused_at_load(saved, tmp_path):
    import shutil

    from flowserve.errors import SavedGraphError

    path, _, _ = saved
    bad = shutil.copytree(path, tmp_path / "bad")
    manifest = json.loads((bad / "flowserve.json").read_text())
    manifest["dynamic_dims"]["x"]["1"] = "features"  # x's dim 1 is 16, not dynamic
    (bad / "flowserve.json").write_text(json.dumps(manifest))
    with pytest.raises(SavedGraphError, match=r"dynamic_dims names dim 1 of 'x', which is not a dynamic"):
        flow.load(bad)
