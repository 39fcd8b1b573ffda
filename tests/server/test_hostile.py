"""Hostile model files and requests: a clear 4xx or a one-line error, never a file read
outside the model folder, a crash, or a stalled server.

Every test plants ``etc/secret`` where the server runs and checks that no response
carries any of its bytes, and that the server is alive (and ready) afterwards.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from flowserve.server.errors import ModelLoadError
from flowserve.server.loading import external_tensor_names, load_model_proto
from flowserve.server.runner import OrtRunner

from . import hostile
from .conftest import running_server
from .hostile import SECRET, leaked

EMBEDDINGS = {
    "sparse initializer": lambda location: hostile.sparse_external_model(location),
    "Constant value attribute": lambda location: hostile.constant_attribute_model(location, False),
    "Constant sparse_value attribute": lambda location: hostile.constant_attribute_model(
        location, True),
    "subgraph": lambda location: hostile.subgraph_model(location),
    "function body": lambda location: hostile.function_model(location),
}


@pytest.fixture
def jail(tmp_path):
    """A working directory holding etc/secret; the test runs inside it."""
    hostile.plant_secret(tmp_path)
    with hostile.working_directory(tmp_path):
        yield tmp_path


@pytest.mark.parametrize("where", list(EMBEDDINGS))
def test_external_data_outside_the_model_folder_is_refused_wherever_the_tensor_sits(jail, where):
    folder = jail / "repo" / "evil" / "1"
    hostile.write_model(folder, EMBEDDINGS[where]("etc/secret"))
    with pytest.raises(ModelLoadError, match="outside the model folder or missing") as caught:
        load_model_proto(folder, root=jail / "repo" / "evil")
    assert "model.onnx" in str(caught.value) and not leaked(str(caught.value).encode())


@pytest.mark.parametrize("where", list(EMBEDDINGS))
def test_external_data_inside_the_model_folder_is_inlined_wherever_the_tensor_sits(jail, where):
    folder = jail / "repo" / "fine" / "1"
    hostile.write_model(folder, EMBEDDINGS[where]("weights.bin"))
    data = bytes(range(len(SECRET)))
    (folder / "weights.bin").write_bytes(data)
    proto = load_model_proto(folder, root=jail / "repo" / "fine")
    assert external_tensor_names(proto) == []
    feeds = {"x": np.ones(len(SECRET), np.uint8)}
    if where == "subgraph":
        feeds["cond"] = np.array(True)
    got = OrtRunner(proto, device="cpu").run(feeds)["y"]
    np.testing.assert_array_equal(got, np.frombuffer(data, np.uint8) + 1)


def test_a_sparse_initializer_pointing_at_a_secret_is_never_served(jail):
    repo = hostile.good_repository(jail / "repo")
    hostile.write_model(repo / "evil" / "1", hostile.sparse_external_model("etc/secret"))
    with running_server(repo, allow_model_control=True) as server:
        url = server.http_url
        x = {"name": "x", "shape": [len(SECRET)], "datatype": "UINT8", "data": [0] * len(SECRET)}
        responses = [httpx.post(f"{url}/v2/models/evil/infer", json={"inputs": [x]}),
                     httpx.post(f"{url}/v2/repository/index"),
                     httpx.post(f"{url}/v2/repository/models/evil/load"),
                     hostile.good_infer(url)]
        assert responses[0].status_code == 503
        index = {row["name"]: row for row in responses[1].json()}
        assert index["evil"]["state"] == "UNAVAILABLE"
        assert "outside the model folder" in index["evil"]["reason"]
        assert index["good"]["state"] == "READY"
        assert responses[2].status_code == 400 and "etc/secret" in responses[2].json()["error"]
        assert responses[3].status_code == 200
        assert not any(leaked(r.content) for r in responses)
        httpx.post(f"{url}/v2/repository/models/evil/unload")
        hostile.assert_alive(url)


def _index(url: str) -> dict:
    return {row["name"]: row for row in httpx.post(f"{url}/v2/repository/index").json()}


def _serve_and_check_refused(repo, model: str, words: str):
    """Serve ``repo``: ``model`` is UNAVAILABLE for ``words``, ``good`` serves, no leaks;
    after unloading ``model`` the server is ready."""
    with running_server(repo, allow_model_control=True) as server:
        url = server.http_url
        index = _index(url)
        assert index[model]["state"] == "UNAVAILABLE", index
        assert words in index[model]["reason"], index[model]["reason"]
        assert "\n" not in index[model]["reason"]
        answers = [hostile.good_infer(url), httpx.post(f"{url}/v2/repository/index"),
                   httpx.post(f"{url}/v2/repository/models/{model}/load"),
                   httpx.get(f"{url}/v2/health/ready")]
        assert answers[0].status_code == 200
        assert answers[2].status_code == 400 and words in answers[2].json()["error"]
        assert answers[3].status_code == 400  # strict readiness: a model failed
        assert _index(url)[model]["state"] == "UNAVAILABLE"  # not left LOADING
        assert not any(leaked(a.content) for a in answers)
        httpx.post(f"{url}/v2/repository/models/{model}/unload")
        hostile.assert_alive(url)


def _outside_model(jail):
    """A real model outside the repository, next to the secret."""
    hostile.write_model(jail / "elsewhere" / "1", hostile.mlp((4, 8, 3), seed=9))
    return jail / "elsewhere"


@pytest.mark.parametrize("link", ["model folder", "version folder", "model.onnx", "config.json",
                                  "external data file"])
def test_links_out_of_a_model_folder_are_refused(jail, link):
    repo = hostile.good_repository(jail / "repo")
    outside = _outside_model(jail)
    evil = repo / "evil"
    if link == "model folder":
        evil.symlink_to(outside)
    elif link == "version folder":
        evil.mkdir()
        (evil / "1").symlink_to(outside / "1")
    elif link == "model.onnx":
        (evil / "1").mkdir(parents=True)
        (evil / "1" / "model.onnx").symlink_to(outside / "1" / "model.onnx")
    elif link == "config.json":
        hostile.write_model(evil / "1", hostile.mlp((4, 8, 3), seed=9))
        (jail / "config.json").write_text('{"max_batch_size": 4}')
        (evil / "config.json").symlink_to(jail / "config.json")
    else:
        hostile.write_model(evil / "1", hostile.sparse_external_model("weights.bin"))
        (evil / "1" / "weights.bin").symlink_to(jail / "etc" / "secret")
    words = "outside the model folder"
    _serve_and_check_refused(repo, "evil", words)


def test_a_saved_directory_whose_manifest_links_outside_is_refused(jail):
    import flowserve as flow
    from tests.exporter.helpers import called_graph, mlp

    repo = hostile.good_repository(jail / "repo")
    saved = repo / "evil" / "1"
    flow.save(called_graph(mlp(), 2, 6), saved)
    (jail / "flowserve.json").write_bytes((saved / "flowserve.json").read_bytes())
    (saved / "flowserve.json").unlink()
    (saved / "flowserve.json").symlink_to(jail / "flowserve.json")
    _serve_and_check_refused(repo, "evil", "outside the saved directory")


def _rehash(directory):
    import hashlib

    manifest = json.loads((directory / "flowserve.json").read_text())
    manifest["files"] = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
                         for name in manifest["files"]}
    (directory / "flowserve.json").write_text(json.dumps(manifest))


def test_a_saved_directory_with_non_json_tensor_metadata_never_stops_the_repository(jail):
    import flowserve as flow
    from safetensors.numpy import save as st_save
    from flowserve.format.tensors import read_tensors
    from tests.exporter.helpers import called_graph, mlp

    repo = hostile.good_repository(jail / "repo")
    saved = repo / "broken" / "1"
    flow.save(called_graph(mlp(), 2, 6), saved)
    arrays = read_tensors(saved / "params.safetensors")
    (saved / "params.safetensors").write_bytes(
        st_save(arrays, metadata={"flowserve.dtypes": "not json {"}))
    _rehash(saved)
    _serve_and_check_refused(repo, "broken", "params.safetensors")


def test_any_exception_while_loading_leaves_only_that_model_unavailable(jail, monkeypatch):
    from flowserve.server import repository

    real = repository.load_model_proto

    def flaky(source, root=None, **options):
        if "boom" in str(source):
            raise RuntimeError("a bug nobody foresaw")
        return real(source, root, **options)

    monkeypatch.setattr(repository, "load_model_proto", flaky)
    repo = hostile.good_repository(jail / "repo")
    hostile.write_model(repo / "boom" / "1", hostile.mlp((4, 8, 3), seed=1))
    _serve_and_check_refused(repo, "boom", "RuntimeError: a bug nobody foresaw")


def test_a_version_folder_may_hold_one_saved_directory(jail):
    import flowserve as flow
    from tests.exporter.helpers import called_graph, mlp

    graph = called_graph(mlp(), 2, 6)
    repo = hostile.good_repository(jail / "repo")
    flow.save(graph, repo / "nested" / "1" / "mlp_saved")
    flow.save(graph, repo / "flat" / "1")
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    expected = graph(flow.tensor(x)).numpy()
    body = {"inputs": [{"name": "x", "shape": [3, 6], "datatype": "FP32",
                        "data": x.ravel().tolist()}]}
    with running_server(repo) as server:
        for name in ("nested", "flat"):
            answer = httpx.post(f"{server.http_url}/v2/models/{name}/infer", json=body)
            assert answer.status_code == 200, answer.text
            got = np.array(answer.json()["outputs"][0]["data"], np.float32).reshape(3, 3)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
            assert not leaked(answer.content)
        hostile.assert_alive(server.http_url)
