"""Triton's request features beyond the KServe protocol: the classification extension
(outputs asked for as top classes, tritonclient's ``class_count``) over HTTP JSON, HTTP
binary and gRPC, checked against numpy's ranking of the same scores and refused where
values have no order; and sequence ids, refused since no served model is stateful."""

from __future__ import annotations

import json

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from onnx import TensorProto, helper

from flowserve.server.classification import top_classes

from .conftest import running_server

SCORES = np.array([[0.5, -1.0, 3.25, 3.25, 2.0], [9.0, 7.5, 8.0, -2.0, 0.0], [1, 1, 1, 1, 1]],
                  np.float32)


def scores_model() -> onnx.ModelProto:
    """x [N, 5] FP32 -> scores (x), counts (INT32), names (BYTES) and flags (BOOL)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])
    outputs = [helper.make_tensor_value_info(name, kind, ["N", 5]) for name, kind in (
        ("scores", TensorProto.FLOAT), ("counts", TensorProto.INT32), ("names", TensorProto.STRING),
        ("flags", TensorProto.BOOL))]
    nodes = [helper.make_node("Identity", ["x"], ["scores"]),
             helper.make_node("Cast", ["x"], ["counts"], to=TensorProto.INT32),
             helper.make_node("Cast", ["x"], ["names"], to=TensorProto.STRING),
             helper.make_node("Greater", ["x", "zero"], ["flags"])]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    graph = helper.make_graph(nodes, "scores", [x], outputs, [zero])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("classes") / "repo"
    for name, config in (("scores", {}), ("flat", {"max_batch_size": 0})):
        (root / name / "1").mkdir(parents=True)
        onnx.save(scores_model(), root / name / "1" / "model.onnx")
        (root / name / "config.json").write_text(json.dumps(config))
    with running_server(root) as running:
        yield running


def expected(scores: np.ndarray, count: int) -> list:
    """The top ``count`` of each row by numpy: descending, ties by the lower index."""
    rows = []
    for row in scores:
        order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:count]
        rows.append([f"{row[i]}:{i}" for i in order])
    return rows


@pytest.mark.parametrize("values, count, batched, classes", [
    ([[1.1, 3.3, 0.5, 2.4]], 2, True, [["3.3:1", "2.4:3"]]),  # the extension's own example
    ([5, 5, 1], 3, False, ["5:0", "5:1", "1:2"]),  # ties: the lower index first
    ([[1, 3, 2], [9, 7, 8]], 2, False, ["9:3", "8:5"]),  # not batched: indices of the flat tensor
    ([[0.25, 0.5]], 5, True, [["0.5:1", "0.25:0"]]),  # more than there are: as many as there are
])
def test_top_classes(values, count, batched, classes):
    dtype = np.float32 if isinstance(np.asarray(values).flat[0], float) else np.uint8
    got = top_classes(np.array(values, dtype), count, batched)
    assert got.dtype == object and [[c.decode() for c in row] for row in np.atleast_2d(got)] \
        == [list(row) for row in np.atleast_2d(np.array(classes, dtype=object))]


def test_server_metadata_lists_the_extension(server):
    assert "classification" in httpx.get(f"{server.http_url}/v2").json()["extensions"]


def test_json_request_gets_classes_beside_a_raw_output(server):
    body = {"inputs": [{"name": "x", "shape": [3, 5], "datatype": "FP32", "data": SCORES.ravel().tolist()}],
            "outputs": [{"name": "scores", "parameters": {"classification": 2}},
                        {"name": "counts", "parameters": {"classification": 0}}]}  # 0: as it is
    answer = httpx.post(f"{server.http_url}/v2/models/scores/infer", json=body, timeout=30).json()
    scores, counts = answer["outputs"]
    assert (scores["datatype"], scores["shape"]) == ("BYTES", [3, 2])
    assert np.array(scores["data"]).reshape(3, 2).tolist() == expected(SCORES, 2)
    assert counts["datatype"] == "INT32" and counts["data"] == SCORES.astype(np.int32).ravel().tolist()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tritonclient_class_count(server, protocol):
    module = triton_http if protocol == "http" else triton_grpc
    url = server.http_url.removeprefix("http://") if protocol == "http" else server.grpc_address
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("x", list(SCORES.shape), "FP32")
    tensor.set_data_from_numpy(SCORES)
    result = client.infer("scores", [tensor], outputs=[module.InferRequestedOutput("scores", class_count=3),
                                                       module.InferRequestedOutput("counts", class_count=1)])
    assert [[c.decode() for c in row] for row in result.as_numpy("scores")] == expected(SCORES, 3)
    assert [[c.decode() for c in row] for row in result.as_numpy("counts")] \
        == expected(SCORES.astype(np.int32), 1)
    flat = client.infer("flat", [tensor], outputs=[module.InferRequestedOutput("scores", class_count=4)])
    assert [c.decode() for c in flat.as_numpy("scores")] == expected(SCORES.reshape(1, -1), 4)[0]
    client.close()


@pytest.mark.parametrize("output, count, words", [
    ("names", 2, "its datatype BYTES has no order"),
    ("flags", 1, "its datatype BOOL has no order"),
    ("scores", -1, "expected a count of classes"),
    ("scores", "2", "expected a count of classes"),
    ("scores", True, "expected a count of classes"),
])
def test_classification_that_cannot_be_done_is_refused(server, output, count, words):
    body = {"inputs": [{"name": "x", "shape": [1, 5], "datatype": "FP32", "data": [0, 1, 2, 3, 4]}],
            "outputs": [{"name": output, "parameters": {"classification": count}}]}
    answer = httpx.post(f"{server.http_url}/v2/models/scores/infer", json=body, timeout=30)
    assert answer.status_code == 400 and words in answer.json()["error"], answer.text


def test_grpc_classification_must_be_an_integer(server):
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    request = triton_grpc.service_pb2.ModelInferRequest(model_name="scores")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 5])
    tensor.contents.fp32_contents.extend([0, 1, 2, 3, 4])
    request.outputs.add(name="scores").parameters["classification"].string_param = "2"
    with pytest.raises(Exception, match="classification: expected a count of classes as int64_param"):
        client._client_stub.ModelInfer(request, timeout=30)
    client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_sequence_id_is_refused_not_ignored(server, protocol):
    """Triton's sequence_id asks for a stateful model's sequence; flowserve serves none, and
    answering as if the request named no sequence would be silently wrong."""
    module = triton_http if protocol == "http" else triton_grpc
    url = server.http_url.removeprefix("http://") if protocol == "http" else server.grpc_address
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("x", list(SCORES.shape), "FP32")
    tensor.set_data_from_numpy(SCORES)
    for sequence_id in (5, "session-7"):
        with pytest.raises(Exception, match="sequence_id .*flowserve serves no stateful"):
            client.infer("scores", [tensor], sequence_id=sequence_id, sequence_start=True)
    assert client.infer("scores", [tensor], sequence_id=0).as_numpy("scores").shape == (3, 5)
    client.close()
