"""Hostile model files and requests: a clear 4xx or a one-line error, never a file read
outside the model folder, a crash, or a stalled server.

Every test plants ``etc/secret`` where the server runs and checks that no response
carries any of its bytes, and that the server is alive (and ready) afterwards.
"""

from __future__ import annotations

import json
import os

import httpx
import numpy as np
import pytest

from flowserve.server.errors import ModelLoadError
from flowserve.server.loading import load_model_proto

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
    from flowserve.server.loading import external_tensor_names
    from flowserve.server.runtime import OrtRunner

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
