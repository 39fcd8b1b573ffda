"""Bad input gets a 4xx/503 with a message naming the problem; nothing else breaks."""

from __future__ import annotations

import http.client
import json
import random
import shutil
import string
import time

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from .conftest import running_server

X = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}


@pytest.fixture(scope="module", name="http")
def http_client(repo_server):
    with httpx.Client(base_url=repo_server.http_url, timeout=30) as client:
        yield client


def infer_body(**changes):
    return {"inputs": [{**X, **changes}]}


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "malformed JSON"),
    (b"[1, 2]", 400, "body: expected an object"),
    (b'{"inputs": 5}', 400, "inputs: expected a list"),
    (json.dumps(infer_body(name="z")).encode(), 400, "'z'"),
    (json.dumps({"inputs": []}).encode(), 400, "missing input"),
    (json.dumps(infer_body(shape=[1, 5], data=[0] * 5)).encode(), 400, "shape [1, 5]"),
    (json.dumps(infer_body(shape=[2, 4])).encode(), 400, "needs 8"),
    (json.dumps(infer_body(shape=[1, -4])).encode(), 400, "non-negative"),
    (json.dumps(infer_body(datatype="FP64")).encode(), 400, "FP64 given, model expects FP32"),
    (json.dumps(infer_body(datatype="COMPLEX")).encode(), 400, "unknown datatype"),
    (json.dumps(infer_body(data=["a", "b", "c", "d"])).encode(), 400, "numbers"),
    (json.dumps(infer_body(data=[[1, 2], [3]])).encode(), 400, "rectangular"),
    (json.dumps(infer_body(shape=[17, 4], data=[0] * 68)).encode(), 400, "max_batch_size"),
    (json.dumps(infer_body(data=None)).encode(), 400, "data"),
    (json.dumps({"inputs": [X, X]}).encode(), 400, "given twice"),
    (json.dumps({"inputs": [X], "outputs": [{"name": "nope"}]}).encode(), 400, "nope"),
    (json.dumps({"inputs": [X], "parameters": {"timeout": "soon"}}).encode(), 400, "timeout"),
])
def test_malformed_requests_get_400_naming_the_field(http, body, status, words):
    answer = http.post("/v2/models/mlp/infer", content=body)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["error"]


def test_binary_sizes_that_disagree_with_shapes(http):
    x = np.ones((1, 4), np.float32)
    cases = [(x.nbytes - 4, "expected 16"), (x.nbytes + 400, "past the end")]
    for size, words in cases:
        header = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                         "parameters": {"binary_data_size": size}}]}).encode()
        answer = http.post("/v2/models/mlp/infer", content=header + x.tobytes(),
                           headers={"Inference-Header-Content-Length": str(len(header))})
        assert answer.status_code == 400 and words in answer.json()["error"], answer.text
    for length in ("abc", "-1", "999999"):
        answer = http.post("/v2/models/mlp/infer", content=b"{}",
                           headers={"Inference-Header-Content-Length": length})
        assert answer.status_code == 400
        assert "Inference-Header-Content-Length" in answer.json()["error"]


def test_unknown_models_versions_and_routes(http):
    assert "unknown model 'nope'" in http.post("/v2/models/nope/infer",
                                               json=infer_body()).json()["error"]
    answer = http.post("/v2/models/mlp/versions/7/infer", json=infer_body())
    assert answer.status_code == 404 and "version '7'" in answer.json()["error"]
    assert http.get("/v2/models/mlp/versions/x1").status_code == 404
    assert http.get("/v3/whatever").json() == {"error": "Not Found"}


def test_failed_model_answers_503_and_others_keep_serving(http):
    answer = http.post("/v2/models/broken/infer", json=infer_body())
    assert answer.status_code == 503 and "model.onnx" in answer.json()["error"]
    assert http.post("/v2/models/mlp/infer", json=infer_body()).status_code == 200


@pytest.mark.parametrize("name", ["..", "../mlp", "..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd",
                                  "mlp%2F..%2F..%2F..", "types%00"])
def test_path_traversal_in_names_reaches_nothing(repo_server, name):
    """Raw paths (http.client does not normalise ``..`` away as httpx would)."""
    body = json.dumps(infer_body())
    for method, path in (("GET", f"/v2/models/{name}"), ("POST", f"/v2/models/{name}/infer"),
                         ("POST", f"/v2/repository/models/{name}/load")):
        connection = http.client.HTTPConnection("127.0.0.1", repo_server.http_port, timeout=30)
        connection.request(method, path, body=body)
        answer = connection.getresponse()
        status, payload = answer.status, json.loads(answer.read())
        connection.close()
        assert status in (400, 403, 404), (path, status)
        assert "error" in payload


def test_model_control_load_unload_stays_inside_the_repository(repository, tmp_path):
    repo = shutil.copytree(repository, tmp_path / "repo")
    shutil.rmtree(repo / "broken")
    (tmp_path / "outside" / "1").mkdir(parents=True)
    shutil.copy(repo / "mlp" / "1" / "model.onnx", tmp_path / "outside" / "1" / "model.onnx")
    with running_server(repo, allow_model_control=True) as server:
        http = httpx.Client(base_url=server.http_url, timeout=30)
        assert http.get("/v2/health/ready").status_code == 200
        assert http.post("/v2/repository/models/outside/load").status_code == 404
        assert http.post("/v2/repository/models/../outside/load").status_code == 404
        refused = http.post("/v2/repository/models/mlp/load",
                            json={"parameters": {"file:1/model.onnx": "AAAA"}})
        assert refused.status_code == 400 and "refused" in refused.json()["error"]
        assert http.post("/v2/repository/models/mlp/unload").status_code == 200
        gone = http.post("/v2/models/mlp/infer", json=infer_body())
        assert gone.status_code == 503 and "unloaded" in gone.json()["error"]
        assert http.post("/v2/models/types/infer", json={"inputs": []}).status_code == 400
        assert http.post("/v2/repository/models/mlp/load").status_code == 200
        assert http.post("/v2/models/mlp/infer", json=infer_body()).status_code == 200
        http.close()


def test_tritonclient_unloads_and_loads_models(repository, tmp_path):
    """tritonclient sends ``unload_dependents`` on every unload, over HTTP and gRPC; any other
    parameter, or one that is not a boolean, is named in the refusal."""
    repo = shutil.copytree(repository, tmp_path / "repo")
    with running_server(repo, allow_model_control=True) as server:
        for client in (triton_http.InferenceServerClient(server.http_url.removeprefix("http://")),
                       triton_grpc.InferenceServerClient(server.grpc_address)):
            for dependents in (False, True):
                client.unload_model("mlp", unload_dependents=dependents)
                assert not client.is_model_ready("mlp")
                client.load_model("mlp")
                assert client.is_model_ready("mlp")
            client.close()
        http = httpx.Client(base_url=server.http_url, timeout=30)
        for parameters, words in (({"unload_dependents": "yes"}, "expected true or false, got 'yes'"),
                                  ({"purge": True}, "unknown ['purge']; unload takes only unload_dependents"),
                                  ([1], "parameters: expected a JSON object")):
            refused = http.post("/v2/repository/models/mlp/unload", json={"parameters": parameters})
            assert refused.status_code == 400 and words in refused.json()["error"], refused.text
        assert http.get("/v2/models/mlp/ready").status_code == 200  # nothing was unloaded
        http.close()


def test_model_control_is_off_by_default(mlp_server):
    answer = httpx.post(f"{mlp_server.http_url}/v2/repository/models/tiny/load")
    assert answer.status_code == 403 and "--allow-model-control" in answer.json()["error"]


def test_oversized_bodies_get_413(mlp_file):
    with running_server(mlp_file, max_request_bytes=1000) as server:
        big = json.dumps({"inputs": [{**X, "data": [0.5] * 4, "pad": "x" * 2000}]}).encode()
        answer = httpx.post(f"{server.http_url}/v2/models/tiny/infer", content=big)
        assert answer.status_code == 413 and "exceed" in answer.json()["error"]

        def chunks():
            for _ in range(20):
                yield b" " * 100

        answer = httpx.post(f"{server.http_url}/v2/models/tiny/infer", content=chunks())
        assert answer.status_code == 413
        assert httpx.post(f"{server.http_url}/v2/models/tiny/infer",
                          json=infer_body()).status_code == 200


def test_bearer_token_guards_everything_but_health(mlp_file):
    with running_server(mlp_file, auth_token="s3cret") as server:
        url = server.http_url
        assert httpx.get(f"{url}/v2/health/ready").status_code == 200
        answer = httpx.post(f"{url}/v2/models/tiny/infer", json=infer_body())
        assert answer.status_code == 401 and "bearer" in answer.json()["error"]
        assert httpx.get(f"{url}/v2/models/tiny").status_code == 401
        good = {"Authorization": "Bearer s3cret"}
        assert httpx.post(f"{url}/v2/models/tiny/infer", json=infer_body(),
                          headers=good).status_code == 200


def _random_value(rng: random.Random, schema: dict, depth: int = 0):
    """A value that usually fits ``schema`` and sometimes does not."""
    if rng.random() < 0.15 or depth > 4:
        return rng.choice([None, -1, 2**70, 1.5, "", "x" * rng.randint(0, 50), [], {}, True,
                           "../../etc/passwd", float("nan")])
    kind = schema.get("type")
    if "anyOf" in schema:
        return _random_value(rng, rng.choice(schema["anyOf"]), depth + 1)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {k: _random_value(rng, v, depth + 1) for k, v in props.items()
                if k in schema.get("required", []) or rng.random() < 0.6}
    if kind == "array":
        return [_random_value(rng, schema.get("items", {}), depth + 1)
                for _ in range(rng.randint(0, 4))]
    if kind == "integer":
        return rng.choice([0, 1, 3, 4, -1, 16, 10**6])
    if kind == "number":
        return rng.uniform(-1e3, 1e3)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        return rng.choice(["x", "FP32", "BYTES", "INT64", "mlp", "y", "in_BOOL",
                           "".join(rng.choices(string.printable, k=8))])
    return rng.choice([0, "a", [1], {"a": 1}])


@pytest.mark.slow
def test_schema_driven_fuzz_finds_no_5xx(repository, tmp_path):
    """Requests generated from /openapi.json (bodies and path parameters) never get a 5xx."""
    repo = shutil.copytree(repository, tmp_path / "repo")
    shutil.rmtree(repo / "broken")  # a failed model's 503 is its documented answer
    with running_server(repo) as server:
        _fuzz(server.http_url)


def _fuzz(url: str) -> None:
    rng = random.Random(1234)
    http = httpx.Client(base_url=url, timeout=30)
    spec = http.get("/openapi.json").json()
    operations = [(path, method, op) for path, item in spec["paths"].items()
                  for method, op in item.items()]
    names = ["mlp", "types", "broken", "nope", "..", "mlp%2F..", "1", "2", "%00"]
    deadline, sent = time.monotonic() + 40, 0
    while sent < 1500 and time.monotonic() < deadline:
        path, method, op = rng.choice(operations)
        url = path.replace("{model_name}", rng.choice(names)).replace(
            "{model_version}", rng.choice(["1", "2", "0", "x", "-1"]))
        schema = (op.get("requestBody", {}).get("content", {})
                  .get("application/json", {}).get("schema"))
        body = json.dumps(_random_value(rng, schema)) if schema else None
        answer = http.request(method.upper(), url, content=body)
        sent += 1
        assert answer.status_code < 500, (method, url, body, answer.text)
        if answer.status_code >= 400:
            assert "error" in answer.json(), answer.text
    assert sent >= 300
    assert http.get("/v2/health/live").status_code == 200
    http.close()
