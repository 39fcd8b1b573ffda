"""gRPC conformance: the proto against the published one, every RPC via tritonclient.grpc."""

from __future__ import annotations

import grpc
import numpy as np
import onnx
import pytest
import tritonclient.grpc as triton_grpc
from google.protobuf import descriptor_pb2
from tritonclient.grpc import model_config_pb2, service_pb2

from flowserve.protocol import protos

from .models import ALL_DATATYPES, mlp_reference, sample


def _fields(descriptor):
    return {f.name: (f.number, f.type, f.type_name.rsplit(".", 1)[-1]) for f in descriptor.field}


def _messages(file_descriptor):
    proto = descriptor_pb2.FileDescriptorProto()
    file_descriptor.CopyToProto(proto)
    found = {}

    def walk(messages, prefix):
        for message in messages:
            found[prefix + message.name] = message
            walk(message.nested_type, prefix + message.name + ".")

    walk(proto.message_type, "")
    return found


def test_every_message_field_matches_the_published_proto():
    """Names, numbers and types of every field we declare equal Triton's published files."""
    ours = _messages(protos._POOL.FindFileByName("grpc_service.proto"))
    published = {**_messages(service_pb2.DESCRIPTOR), **_messages(model_config_pb2.DESCRIPTOR)}
    for name, message in ours.items():
        assert name in published, name
        theirs = _fields(published[name])
        for field, spec in _fields(message).items():
            assert theirs.get(field) == spec, (name, field)


def test_service_methods_match_the_published_service():
    published = {m.name: (m.input_type.name, m.output_type.name)
                 for m in service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods}
    service = protos._POOL.FindServiceByName(protos.SERVICE_NAME)
    for method in service.methods:
        assert published[method.name] == (method.input_type.name, method.output_type.name)


def test_committed_descriptor_is_generated_from_the_proto():
    pytest.importorskip("grpc_tools")
    from flowserve.protocol.protos import generate

    assert generate.main(["--check"]) == 0


@pytest.fixture(scope="module")
def triton(repo_server):
    client = triton_grpc.InferenceServerClient(repo_server.grpc_address)
    yield client
    client.close()


def test_health_and_metadata_rpcs(triton):
    assert triton.is_server_live() and not triton.is_server_ready()
    assert triton.is_model_ready("mlp") and triton.is_model_ready("mlp", "1")
    assert not triton.is_model_ready("broken") and not triton.is_model_ready("nope")
    metadata = triton.get_server_metadata()
    assert metadata.name == "flowserve" and "binary_tensor_data" in metadata.extensions
    model = triton.get_model_metadata("mlp", as_json=True)
    assert model["versions"] == ["1", "2"]
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "4"]}]


def test_model_config_statistics_and_index_rpcs(triton):
    config = triton.get_model_config("mlp", as_json=True)["config"]
    assert config["max_batch_size"] == 16 and config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == "200"
    stats = triton.get_inference_statistics("mlp", as_json=True)["model_stats"]
    assert {s["version"] for s in stats} == {"1", "2"}
    index = triton.get_model_repository_index(as_json=True)["models"]
    assert {"name": "broken", "state": "UNAVAILABLE"}.items() <= next(
        m for m in index if m["name"] == "broken").items()


def test_model_infer_matches_reference(triton, repository):
    x = np.random.default_rng(5).standard_normal((4, 4)).astype(np.float32)
    tensor = triton_grpc.InferInput("x", [4, 4], "FP32")
    tensor.set_data_from_numpy(x)
    for version in ("1", "2"):
        result = triton.infer("mlp", [tensor], model_version=version, request_id="q1")
        reference = mlp_reference(onnx.load(str(repository / "mlp" / version / "model.onnx")), x)
        scale = float(np.max(np.abs(reference)))
        np.testing.assert_allclose(result.as_numpy("y"), reference, rtol=1e-5, atol=1e-5 * scale)
        assert result.get_response().id == "q1"


def test_every_datatype_round_trips(triton):
    tensors = []
    for datatype in ALL_DATATYPES:
        tensor = triton_grpc.InferInput(f"in_{datatype}", [2, 3], datatype)
        array = sample(datatype)
        if datatype == "BF16":
            tensor.set_data_from_numpy(array.astype(np.float32))
        else:
            tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = triton.infer("types", tensors)
    for datatype in ALL_DATATYPES:
        if datatype == "BF16":
            raw = result.as_numpy("out_BF16")  # tritonclient returns float32 for BF16
            np.testing.assert_array_equal(raw, sample("BF16").astype(np.float32))
        else:
            np.testing.assert_array_equal(result.as_numpy(f"out_{datatype}"), sample(datatype))


def test_typed_contents_are_accepted(repo_server):
    request = protos.ModelInferRequest(model_name="mlp", model_version="1")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([1, 2, 3, 4])
    with grpc.insecure_channel(repo_server.grpc_address) as channel:
        call = channel.unary_unary(f"/{protos.SERVICE_NAME}/ModelInfer",
                                   request_serializer=protos.ModelInferRequest.SerializeToString,
                                   response_deserializer=protos.ModelInferResponse.FromString)
        response = call(request, timeout=10)
    assert list(response.outputs[0].shape) == [1, 3] and len(response.raw_output_contents) == 1


def test_stream_infer(triton):
    results = []
    triton.start_stream(callback=lambda result, error: results.append((result, error)))
    tensor = triton_grpc.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    for _ in range(3):
        triton.async_stream_infer("mlp", [tensor])
    bad = triton_grpc.InferInput("x", [1, 5], "FP32")
    bad.set_data_from_numpy(np.ones((1, 5), np.float32))
    triton.async_stream_infer("mlp", [bad])
    triton.stop_stream()
    assert len(results) == 4
    assert sum(error is None for _, error in results) == 3
    assert any(error is not None and "shape" in str(error) for _, error in results)


@pytest.mark.parametrize("call, code, words", [
    (lambda c: c.get_model_metadata("nope"), "NOT_FOUND", "unknown model"),
    (lambda c: c.get_model_metadata("mlp", "9"), "NOT_FOUND", "version"),
    (lambda c: c.get_model_metadata("broken"), "UNAVAILABLE", "not ready"),
    (lambda c: c.load_model("mlp"), "PERMISSION_DENIED", None),
])
def test_errors_map_to_grpc_codes(mlp_server, repo_server, call, code, words):
    client = triton_grpc.InferenceServerClient(repo_server.grpc_address)
    if code == "PERMISSION_DENIED":  # mlp_server runs without model control
        client = triton_grpc.InferenceServerClient(mlp_server.grpc_address)
    with pytest.raises(triton_grpc.InferenceServerException) as info:
        call(client)
    assert info.value.status() == f"StatusCode.{code}"
    assert words is None or words in info.value.message()


def test_bad_infer_gets_invalid_argument(triton):
    tensor = triton_grpc.InferInput("x", [1, 4], "FP64")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float64))
    with pytest.raises(triton_grpc.InferenceServerException) as info:
        triton.infer("mlp", [tensor])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "FP64" in info.value.message() and "FP32" in info.value.message()
