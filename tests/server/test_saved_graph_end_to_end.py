"""A graph saved with the public API (``flow.save``) served and queried end to end."""

from __future__ import annotations

import numpy as np
import pytest

from flowserve.clients import GRPCClient, HTTPClient

from .conftest import running_server

exporter = pytest.importorskip("flowserve.exporter")
if not hasattr(exporter, "export"):
    pytest.skip("flowserve.exporter.export is not available yet", allow_module_level=True)


def test_saved_directory_served_over_http_and_grpc(tmp_path):
    import flowserve as flow

    model = flow.nn.Sequential(flow.nn.Linear(4, 8), flow.nn.ReLU(), flow.nn.Linear(8, 3))

    class TinyGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    graph = TinyGraph()
    graph(flow.randn(2, 4))
    flow.save(graph, tmp_path / "m")
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    reference = model(flow.tensor(x)).numpy()
    with running_server(tmp_path / "m") as server:
        name = HTTPClient(server.http_url).repository_index()[0]["name"]
        for client in (HTTPClient(server.http_url), GRPCClient(server.grpc_address)):
            outputs = client.infer(name, {client.model_metadata(name)["inputs"][0]["name"]: x})
            (y,) = outputs.values()
            scale = float(np.max(np.abs(reference)))
            np.testing.assert_allclose(y, reference, rtol=1e-5, atol=1e-5 * scale)


def test_batch_computed_by_shape_arithmetic_is_served_at_any_batch_size(tmp_path):
    """``B, T, C = x.shape; h.view(B * T, C)`` in build(): the saved graph keeps a dynamic
    batch, and the server runs requests of 1 and 5 rows (and merges them)."""
    import flowserve as flow

    flow.manual_seed(0)
    proj = flow.nn.Linear(4, 4)

    class Tokens(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.proj = proj

        def build(self, x):
            B, T, C = x.shape
            return self.proj(x).view(B * T, C).relu().view(B, T * C) + flow.zeros(B + 1, 1).sum()

    graph = Tokens()
    graph(flow.randn(2, 3, 4))
    flow.save(graph, tmp_path / "m")
    with running_server(tmp_path / "m") as server:
        client = HTTPClient(server.http_url)
        name = client.repository_index()[0]["name"]
        for batch in (1, 5):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 4)).astype(np.float32)
            reference = proj(flow.tensor(x)).relu().numpy().reshape(batch, 12)
            (y,) = client.infer(name, {client.model_metadata(name)["inputs"][0]["name"]: x}).values()
            np.testing.assert_allclose(y, reference, rtol=1e-5, atol=1e-5 * float(np.abs(reference).max()))


def test_corrupted_saved_directory_is_reported_naming_the_file(tmp_path, repository):
    import shutil

    repo = shutil.copytree(repository, tmp_path / "repo")
    (repo / "saved" / "1").mkdir(parents=True)
    (repo / "saved" / "1" / "flowserve.json").write_text("{ not json")
    with running_server(repo) as server:
        rows = HTTPClient(server.http_url).repository_index()
        saved = next(r for r in rows if r["name"] == "saved")
        assert saved["state"] == "UNAVAILABLE" and "flowserve.json" in saved["reason"]
        assert HTTPClient(server.http_url).is_model_ready("mlp")


def test_baked_batch_size_is_explained_by_the_server(tmp_path):
    """A graph whose build() fixed the batch size is served at that size only, and a request
    at another size is refused naming the op and the line that fixed it."""
    import flowserve as flow

    class Baked(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.token = flow.nn.Parameter(flow.zeros(1, 1, 4))

        def forward(self, x):
            return flow.cat([self.token.expand(2, -1, -1), x], dim=1)  # the batch size written out

    class BakedGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = Baked()

        def build(self, x):
            return self.model(x)

    graph = BakedGraph()
    graph(flow.randn(2, 3, 4))
    with pytest.warns(UserWarning, match="expand"):
        flow.save(graph, tmp_path / "m")
    with running_server(tmp_path / "m") as server:
        client = HTTPClient(server.http_url)
        name = client.repository_index()[0]["name"]
        assert client.infer(name, {"x": np.zeros((2, 3, 4), np.float32)})["output_0"].shape == (2, 4, 4)
        with pytest.raises(Exception, match=r"(?s)expects \[2, 3, 4\].*'expand'.*test_saved_graph_end_to_end.py"):
            client.infer(name, {"x": np.zeros((5, 3, 4), np.float32)})
