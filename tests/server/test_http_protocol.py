"""REST conformance: every Open Inference Protocol endpoint, JSON and binary, every datatype.

Checked against the published REST spec (field names and shapes of each body)
and against ``tritonclient.http`` as the standard peer.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.http as triton_http

from .models import ALL_DATATYPES, mlp_reference, sample


@pytest.fixture(scope="module")
def http(repo_server):
    with httpx.Client(base_url=repo_server.http_url, timeout=30) as client:
        yield client


def mlp_model(repository, version):
    return onnx.load(str(repository / "mlp" / version / "model.onnx"))


def close(actual, reference):
    scale = float(np.max(np.abs(reference))) or 1.0
    np.testing.assert_allclose(actual, reference, rtol=1e-5, atol=1e-5 * scale)


def test_health_live_and_server_metadata(http):
    assert http.get("/v2/health/live").json() == {"live": True}
    metadata = http.get("/v2").json()
    assert metadata["name"] == "flowserve" and isinstance(metadata["version"], str)
    assert "binary_tensor_data" in metadata["extensions"]


def test_ready_is_false_while_a_model_failed_to_load(http, mlp_server):
    answer = http.get("/v2/health/ready")
    assert answer.status_code == 400 and answer.json() == {"ready": False}
    assert httpx.get(f"{mlp_server.http_url}/v2/health/ready").json() == {"ready": True}


def test_model_metadata_follows_the_spec(http):
    for path in ("/v2/models/mlp", "/v2/models/mlp/versions/2"):
        body = http.get(path).json()
        # which CPU policy a model gets depends on how long its runs take here
        assert body["parameters"].pop("sessions")["policy"] in ("fixed", "wide-narrow")
        assert body == {
            "name": "mlp", "versions": ["1", "2"], "platform": "onnxruntime_onnx",
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}],
            # the protocol's optional parameters: these models carry no reference examples
            "parameters": {"verified": False, "verification": "no reference examples stored with the model"},
        }


def test_model_ready_answers_200_or_4xx_with_reason(http):
    assert http.get("/v2/models/mlp/ready").status_code == 200
    assert http.get("/v2/models/mlp/versions/1/ready").status_code == 200
    broken = http.get("/v2/models/broken/ready")
    assert broken.status_code == 400 and "model.onnx" in broken.json()["error"]
    assert http.get("/v2/models/nope/ready").status_code == 404


@pytest.mark.parametrize("nested", [True, False])
def test_json_infer_matches_each_version(http, repository, nested):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for version in ("1", "2"):
        data = x.tolist() if nested else x.reshape(-1).tolist()
        body = {"id": "abc", "inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP32",
                                         "data": data}]}
        answer = http.post(f"/v2/models/mlp/versions/{version}/infer", json=body)
        assert answer.status_code == 200, answer.text
        result = answer.json()
        assert result["model_name"] == "mlp" and result["model_version"] == version
        assert result["id"] == "abc"
        (output,) = result["outputs"]
        assert output["name"] == "y" and output["datatype"] == "FP32"
        assert output["shape"] == [3, 3]
        close(np.array(output["data"]).reshape(3, 3),
              mlp_reference(mlp_model(repository, version), x))


def test_unversioned_infer_uses_the_latest_version(http, repository):
    x = np.ones((1, 4), np.float32)
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}
    result = http.post("/v2/models/mlp/infer", json=body).json()
    assert result["model_version"] == "2"
    close(np.array(result["outputs"][0]["data"]).reshape(1, 3),
          mlp_reference(mlp_model(repository, "2"), x))


def test_binary_extension_request_and_response(http, repository):
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    header = json.dumps({
        "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }).encode()
    answer = http.post("/v2/models/mlp/versions/1/infer", content=header + x.tobytes(),
                       headers={"Inference-Header-Content-Length": str(len(header))})
    assert answer.status_code == 200, answer.text
    split = int(answer.headers["Inference-Header-Content-Length"])
    meta = json.loads(answer.content[:split])
    (output,) = meta["outputs"]
    assert output["parameters"] == {"binary_data_size": 2 * 3 * 4}
    y = np.frombuffer(answer.content[split:], np.float32).reshape(2, 3)
    close(y, mlp_reference(mlp_model(repository, "1"), x))


@pytest.mark.parametrize("binary", [True, False])
def test_every_datatype_round_trips_through_identity(http, binary):
    inputs, blobs = [], []
    for datatype in ALL_DATATYPES:
        array = sample(datatype)
        entry = {"name": f"in_{datatype}", "shape": [2, 3], "datatype": datatype}
        if binary or datatype == "BF16":
            raw = _raw(array)
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = _json_data(array)
        inputs.append(entry)
    header = json.dumps({"inputs": inputs,
                         "parameters": {"binary_data_output": binary}}).encode()
    answer = http.post("/v2/models/types/infer", content=header + b"".join(blobs),
                       headers={"Inference-Header-Content-Length": str(len(header))})
    assert answer.status_code == 200, answer.text
    split = int(answer.headers.get("Inference-Header-Content-Length", len(answer.content)))
    meta, offset = json.loads(answer.content[:split]), split
    for output in meta["outputs"]:
        datatype = output["datatype"]
        assert output["name"] == f"out_{datatype}" and output["shape"] == [2, 3]
        expected = sample(datatype)
        if binary:
            size = output["parameters"]["binary_data_size"]
            got = _from_raw(answer.content[offset:offset + size], datatype)
            offset += size
            np.testing.assert_array_equal(got, expected)
        elif datatype == "BYTES":
            assert output["data"] == [x.decode() for x in expected.reshape(-1)]
        else:
            np.testing.assert_array_equal(
                np.array(output["data"]).astype(np.float64),
                expected.reshape(-1).astype(np.float64))


def _raw(array):
    if array.dtype == object:
        return b"".join(len(x).to_bytes(4, "little") + x for x in array.reshape(-1))
    return array.tobytes()


def _from_raw(raw, datatype):
    if datatype == "BYTES":
        items, offset = [], 0
        while offset < len(raw):
            n = int.from_bytes(raw[offset:offset + 4], "little")
            items.append(raw[offset + 4:offset + 4 + n])
            offset += 4 + n
        return np.array(items, dtype=object).reshape(2, 3)
    return np.frombuffer(raw, ALL_DATATYPES[datatype][1]).reshape(2, 3)


def _json_data(array):
    if array.dtype == object:
        return [x.decode() for x in array.reshape(-1)]
    return array.astype(np.float64 if array.dtype.kind == "f" else array.dtype).tolist()


def test_requested_outputs_subset(http):
    body = {"inputs": [{"name": f"in_{t}", "shape": [1, 3], "datatype": t,
                        "data": _json_data(sample(t, rows=1))}
                       for t in ALL_DATATYPES if t != "BF16"]
            + [{"name": "in_BF16", "shape": [1, 3], "datatype": "BF16", "data": [1, 2, 3]}],
            "outputs": [{"name": "out_INT64"}, {"name": "out_BF16"}]}
    result = http.post("/v2/models/types/infer", json=body).json()
    assert [o["name"] for o in result["outputs"]] == ["out_INT64", "out_BF16"]
    assert result["outputs"][1]["data"] == [1.0, 2.0, 3.0]


def test_config_is_triton_style(http):
    config = http.get("/v2/models/mlp/config").json()
    assert config["name"] == "mlp" and config["max_batch_size"] == 16
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}]
    assert config["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [3]}]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 200
    assert config["version_policy"] == {"all": {}}


def test_statistics_count_inferences_and_executions(http):
    before = http.get("/v2/models/mlp/versions/1/stats").json()["model_stats"][0]
    body = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [0] * 8}]}
    assert http.post("/v2/models/mlp/versions/1/infer", json=body).status_code == 200
    after = http.get("/v2/models/mlp/versions/1/stats").json()["model_stats"][0]
    assert after["inference_count"] == before["inference_count"] + 2
    assert after["execution_count"] == before["execution_count"] + 1
    assert after["inference_stats"]["success"]["count"] == (
        before["inference_stats"]["success"]["count"] + 1)
    names = {(s["name"], s["version"]) for s in http.get("/v2/models/stats").json()["model_stats"]}
    assert {("mlp", "1"), ("mlp", "2"), ("types", "1")} <= names


def test_repository_index_lists_states_and_reasons(http):
    rows = http.post("/v2/repository/index", json={}).json()
    states = {(r["name"], r["version"]): r for r in rows}
    assert states[("mlp", "1")]["state"] == "READY"
    assert states[("broken", "")]["state"] == "UNAVAILABLE"
    assert "not a valid ONNX model" in states[("broken", "")]["reason"]
    ready_only = http.post("/v2/repository/index", json={"ready": True}).json()
    assert all(r["state"] == "READY" for r in ready_only)


def test_metrics_show_requests_and_batches(http):
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0] * 4}]}
    http.post("/v2/models/mlp/infer", json=body)
    text = http.get("/metrics").text
    for family in ("flowserve_request_success_total", "flowserve_inference_count_total",
                   "flowserve_execution_count_total", "flowserve_batch_size_bucket",
                   "flowserve_queue_duration_seconds_bucket",
                   "flowserve_compute_duration_seconds_bucket"):
        assert family in text


def test_openapi_documents_the_infer_body(http):
    spec = http.get("/openapi.json").json()
    infer = spec["paths"]["/v2/models/{model_name}/infer"]["post"]
    schema = infer["requestBody"]["content"]["application/json"]["schema"]
    assert "inputs" in schema["required"]
    assert http.get("/docs").status_code == 200


def test_tritonclient_http_drives_the_server(repo_server, repository):
    client = triton_http.InferenceServerClient(repo_server.http_url.split("//")[1])
    assert client.is_server_live() and not client.is_server_ready()
    assert client.is_model_ready("mlp") and not client.is_model_ready("broken")
    assert client.get_server_metadata()["name"] == "flowserve"
    assert client.get_model_metadata("mlp")["inputs"][0]["shape"] == [-1, 4]
    assert client.get_model_config("mlp")["max_batch_size"] == 16
    assert client.get_inference_statistics("mlp")["model_stats"]
    assert {m["name"] for m in client.get_model_repository_index()} >= {"mlp", "types"}
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    for binary in (True, False):
        tensor = triton_http.InferInput("x", [5, 4], "FP32")
        tensor.set_data_from_numpy(x, binary_data=binary)
        wanted = [triton_http.InferRequestedOutput("y", binary_data=binary)]
        result = client.infer("mlp", [tensor], model_version="1", outputs=wanted)
        close(result.as_numpy("y"), mlp_reference(mlp_model(repository, "1"), x))
    client.close()


def test_tritonclient_http_every_datatype(repo_server):
    client = triton_http.InferenceServerClient(repo_server.http_url.split("//")[1])
    tensors = []
    for datatype in ALL_DATATYPES:
        if datatype == "BF16":
            continue  # tritonclient's numpy conversion has no bfloat16
        tensor = triton_http.InferInput(f"in_{datatype}", [2, 3], datatype)
        tensor.set_data_from_numpy(sample(datatype), binary_data=datatype != "FP16")
        tensors.append(tensor)
    bf16 = triton_http.InferInput("in_BF16", [2, 3], "BF16")
    bf16.set_data_from_numpy(sample("BF16").astype(np.float32), binary_data=True)
    tensors.append(bf16)
    result = client.infer("types", tensors)
    for datatype in ALL_DATATYPES:
        if datatype != "BF16":
            np.testing.assert_array_equal(result.as_numpy(f"out_{datatype}"), sample(datatype))
    client.close()


def test_accepted_sockets_have_tcp_nodelay(mlp_server):
    """Headers and body in separate segments must not stall (Nagle + delayed ACK)."""
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                   "data": [1, 2, 3, 4]}]}).encode()
    request = (f"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", mlp_server.http_port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        durations = []
        for _ in range(20):
            started = time.perf_counter()
            sock.sendall(request)
            sock.sendall(body)
            answer = b""
            while b'"outputs"' not in answer or not answer.endswith(b"}]}"):
                answer += sock.recv(65536)
            durations.append(time.perf_counter() - started)
    assert sorted(durations)[10] < 0.02, durations


def _infer_request(x: np.ndarray, extra: str = "", version: str = "1.1") -> tuple[bytes, bytes]:
    body = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    head = (f"POST /v2/models/tiny/infer HTTP/{version}\r\nHost: x\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head, body


def _read_answer(reader) -> tuple[int, dict, bytes]:
    status = int(reader.readline().split()[1])
    headers = {}
    for line in iter(reader.readline, b"\r\n"):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, reader.read(int(headers.get("content-length", 0)))


def _outputs(body: bytes) -> np.ndarray:
    (output,) = json.loads(body)["outputs"]
    return np.array(output["data"], np.float32).reshape(output["shape"])


def test_infer_keeps_http_semantics_on_a_raw_connection(mlp_server, mlp_file):
    """The infer route, answered by flowserve's protocol without ASGI, as every other
    route: pipelined requests answered in order, date header, keep-alive."""
    model = onnx.load(str(mlp_file))
    xs = [np.full((1, 4), value, np.float32) for value in (-1.0, 0.5, 2.0)]
    pipelined = b"".join(b"".join(_infer_request(x)) for x in xs[:2])
    pipelined += b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n" + b"".join(_infer_request(xs[2]))
    with socket.create_connection(("127.0.0.1", mlp_server.http_port), timeout=30) as sock:
        sock.sendall(pipelined)  # four requests in one write
        reader = sock.makefile("rb")
        answers = [_read_answer(reader) for _ in range(4)]
        assert [status for status, _, _ in answers] == [200] * 4
        assert all("date" in headers and "connection" not in headers for _, headers, _ in answers)
        for x, (_, _, body) in zip(xs[:2] + xs[2:], answers[:2] + answers[3:]):
            close(_outputs(body), mlp_reference(model, x))
        sock.sendall(b"".join(_infer_request(xs[0])))  # the connection is still open
        assert _read_answer(reader)[0] == 200


@pytest.mark.parametrize("ending", ["close", "http10"])
def test_infer_answers_then_closes_when_the_request_says_so(mlp_server, mlp_file, ending):
    x = np.ones((1, 4), np.float32)
    head, body = (_infer_request(x, "Connection: close\r\n") if ending == "close"
                  else _infer_request(x, version="1.0"))
    with socket.create_connection(("127.0.0.1", mlp_server.http_port), timeout=30) as sock:
        sock.sendall(head + body)
        reader = sock.makefile("rb")
        status, headers, answer = _read_answer(reader)
        assert status == 200 and headers["connection"] == "close"
        close(_outputs(answer), mlp_reference(onnx.load(str(mlp_file)), x))
        assert reader.read() == b""  # then the server closes


def test_infer_honours_expect_100_continue(mlp_server, mlp_file):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    head, body = _infer_request(x, "Expect: 100-continue\r\n")
    with socket.create_connection(("127.0.0.1", mlp_server.http_port), timeout=30) as sock:
        sock.sendall(head)
        reader = sock.makefile("rb")
        assert reader.readline() == b"HTTP/1.1 100 Continue\r\n" and reader.readline() == b"\r\n"
        sock.sendall(body)
        status, _, answer = _read_answer(reader)
        assert status == 200
        close(_outputs(answer), mlp_reference(onnx.load(str(mlp_file)), x))
