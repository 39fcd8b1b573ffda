"""Triton's system shared-memory extension (``--allow-client-shm``): inputs read from and
outputs written to POSIX shared-memory objects the test creates as a client process would
(``multiprocessing.shared_memory``: ``shm_open`` under ``/dev/shm``), through tritonclient's
HTTP and gRPC clients, checked against the bytes tritonclient itself serializes; the region
calls; and the refusals: off by default, keys outside ``/dev/shm`` or through links, sizes
and offsets past a region or object, an object shrunk after registering (an error, not a
crash), shared memory and data at once."""

from __future__ import annotations

import contextlib
import os
from multiprocessing import shared_memory

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import serialize_byte_tensor

from flowserve.server import ServerSettings

from .conftest import running_server
from .models import ALL_DATATYPES, mlp, mlp_reference, sample

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs POSIX shared memory")


@pytest.fixture(scope="module")
def server(repository):
    with running_server(repository, allow_client_shm=True) as running:
        yield running


@pytest.fixture
def objects():
    """Makes shared-memory objects of a given size; removes them afterwards."""
    made = []

    def make(size: int) -> shared_memory.SharedMemory:
        made.append(shared_memory.SharedMemory(create=True, size=size))
        return made[-1]

    yield make
    for each in made:
        each.close()
        with contextlib.suppress(FileNotFoundError):
            each.unlink()


def key(obj: shared_memory.SharedMemory) -> str:
    return "/" + obj.name


def raw(array: np.ndarray) -> bytes:
    """The tensor's bytes as tritonclient serializes them (BYTES: length-prefixed)."""
    if array.dtype == object:
        return serialize_byte_tensor(array).item()
    return np.ascontiguousarray(array).tobytes()


def clients(server, protocol: str):
    if protocol == "http":
        return triton_http, triton_http.InferenceServerClient(server.http_url.split("//")[1])
    return triton_grpc, triton_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


@pytest.fixture
def regions(server):
    """Unregisters every region after a test."""
    yield
    httpx.post(f"{server.http_url}/v2/systemsharedmemory/unregister").raise_for_status()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_datatype_in_and_out_of_shared_memory(server, objects, regions, protocol):
    """Every other datatype's input comes from shared memory (packed at offsets in one
    object) and its output goes back into another; the rest travel in the body: gRPC's
    raw_input_contents then holds only the inputs not in shared memory, in order."""
    module, client = clients(server, protocol)
    data = {t: sample(t, seed=i) for i, t in enumerate(ALL_DATATYPES)}
    shared = list(ALL_DATATYPES)[::2]
    source, target = objects(4096), objects(4096)
    client.register_system_shared_memory("in", key(source), 4096)
    client.register_system_shared_memory("out", key(target), 4096)
    inputs, outputs, places, offset = [], [], {}, 0
    for datatype, array in data.items():
        tensor = module.InferInput(f"in_{datatype}", list(array.shape), datatype)
        wanted = module.InferRequestedOutput(f"out_{datatype}")
        if datatype in shared:
            blob = raw(array)
            source.buf[offset:offset + len(blob)] = blob
            tensor.set_shared_memory("in", len(blob), offset=offset)
            wanted.set_shared_memory("out", len(blob) + 16, offset=offset)
            places[datatype] = (offset, len(blob))
            offset += len(blob) + 24
        else:
            tensor.set_data_from_numpy(array)
        inputs.append(tensor)
        outputs.append(wanted)
    result = client.infer("types", inputs, outputs=outputs)
    response = result.get_response(**({"as_json": True} if protocol == "grpc" else {}))
    answered = {o["name"]: o for o in response["outputs"]}
    for datatype, array in data.items():
        name = f"out_{datatype}"
        if datatype in shared:
            start, size = places[datatype]
            assert bytes(target.buf[start:start + size]) == raw(array), datatype
            entry = answered[name]
            assert entry["shape"] in ([2, 3], ["2", "3"]) and "data" not in entry
            if protocol == "grpc":  # where the bytes went, and how many
                assert entry["parameters"]["shared_memory_byte_size"]["int64_param"] == str(size)
                assert entry["parameters"]["shared_memory_offset"]["int64_param"] == str(start)
        else:
            np.testing.assert_array_equal(result.as_numpy(name), array, err_msg=datatype)


def test_region_offsets_add_up(server, objects, regions):
    """A region starts ``offset`` bytes into its object and a tensor ``shared_memory_offset``
    bytes into its region: the server reads and writes at the sum (raw JSON over HTTP)."""
    model = mlp((4, 8, 3), seed=1)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    obj = objects(8192)
    obj.buf[1000 + 24:1000 + 24 + x.nbytes] = x.tobytes()
    for name, offset, size in (("in", 1000, 2000), ("out", 4096, 1024)):
        httpx.post(f"{server.http_url}/v2/systemsharedmemory/region/{name}/register",
                   json={"key": key(obj), "offset": offset, "byte_size": size}).raise_for_status()
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [5, 4], "parameters": {
        "shared_memory_region": "in", "shared_memory_offset": 24, "shared_memory_byte_size": x.nbytes}}],
        "outputs": [{"name": "y", "parameters": {"shared_memory_region": "out",
                                                 "shared_memory_offset": 16, "shared_memory_byte_size": 60}}]}
    answer = httpx.post(f"{server.http_url}/v2/models/mlp/versions/1/infer", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [5, 3]}]
    y = np.frombuffer(bytes(obj.buf[4096 + 16:4096 + 16 + 60]), np.float32).reshape(5, 3)
    np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-6)


def test_status_and_unregister_over_both_protocols(server, objects, regions):
    obj = objects(4096)
    http = triton_http.InferenceServerClient(server.http_url.split("//")[1])
    grpc = triton_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    http.register_system_shared_memory("a", key(obj), 1024)
    grpc.register_system_shared_memory("b", key(obj), 512, offset=2048)
    assert http.get_system_shared_memory_status() == [
        {"name": "a", "key": key(obj), "offset": 0, "byte_size": 1024},
        {"name": "b", "key": key(obj), "offset": 2048, "byte_size": 512}]
    status = grpc.get_system_shared_memory_status(region_name="b", as_json=True)
    assert status["regions"]["b"] == {"name": "b", "key": key(obj), "offset": "2048",
                                      "byte_size": "512"}
    grpc.unregister_system_shared_memory("a")
    grpc.unregister_system_shared_memory("never-registered")  # no error, as in Triton
    assert [r["name"] for r in http.get_system_shared_memory_status()] == ["b"]
    http.unregister_system_shared_memory()
    assert http.get_system_shared_memory_status() == []
    with pytest.raises(triton_http.InferenceServerException, match="no system shared memory region 'b'"):
        http.get_system_shared_memory_status("b")
    # CUDA regions: none registered, and registering one is refused with what to use instead
    assert httpx.get(f"{server.http_url}/v2/cudasharedmemory/status").json() == []
    assert grpc.get_cuda_shared_memory_status(as_json=True) == {}
    httpx.post(f"{server.http_url}/v2/cudasharedmemory/unregister").raise_for_status()
    refused = httpx.post(f"{server.http_url}/v2/cudasharedmemory/region/c/register",
                         json={"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8})
    assert refused.status_code == 400 and "system shared memory only" in refused.json()["error"]


def register(server, name: str, **body) -> httpx.Response:
    return httpx.post(f"{server.http_url}/v2/systemsharedmemory/region/{name}/register", json=body)


def test_registering_refuses_what_is_not_a_region_of_a_shared_memory_object(server, objects, regions):
    obj = objects(4096)
    link = f"/dev/shm/flowserve-test-link-{os.getpid()}"
    os.symlink("/etc/hostname", link)
    try:
        cases = [
            ({"key": "../etc/passwd", "byte_size": 8}, "not a shared-memory object name"),
            ({"key": "/a/b", "byte_size": 8}, "not a shared-memory object name"),
            ({"key": "..", "byte_size": 8}, "not a shared-memory object name"),
            ({"key": "/flowserve-no-such-object", "byte_size": 8}, "cannot open"),
            ({"key": "/" + os.path.basename(link), "byte_size": 8}, "cannot open"),  # no links
            ({"key": key(obj), "byte_size": 4097}, "runs past the end"),
            ({"key": key(obj), "offset": 4000, "byte_size": 97}, "runs past the end"),
            ({"key": key(obj), "byte_size": -1}, "non-negative"),
            ({"key": key(obj)}, "expected {"),
            ({"key": key(obj), "byte_size": 8, "path": "/etc"}, "expected {"),
        ]
        for body, message in cases:
            answer = register(server, "r", **body)
            assert answer.status_code == 400 and message in answer.json()["error"], (body, answer.text)
    finally:
        os.unlink(link)
    assert register(server, "r", key=key(obj), byte_size=64).status_code == 200
    again = register(server, "r", key=key(obj), byte_size=64)
    assert again.status_code == 400 and "already registered" in again.json()["error"]


def infer(server, inputs: list, outputs: list = (), model: str = "mlp/versions/1") -> httpx.Response:
    return httpx.post(f"{server.http_url}/v2/models/{model}/infer",
                      json={"inputs": inputs, "outputs": list(outputs)})


def x_input(**parameters) -> dict:
    return {"name": "x", "datatype": "FP32", "shape": [2, 4], "parameters": parameters}


def test_infer_refuses_shared_memory_it_cannot_use(server, objects, regions):
    obj = objects(4096)
    assert register(server, "r", key=key(obj), byte_size=256).status_code == 200
    whole = {"shared_memory_region": "r", "shared_memory_byte_size": 32}
    z_in = {"name": "z", "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 24}}
    cases = [
        ([x_input(shared_memory_region="nope", shared_memory_byte_size=32)], [],
         "no system shared memory region 'nope'"),
        ([x_input(shared_memory_region="r", shared_memory_byte_size=16)], [],
         "got 16 bytes of data, expected 32"),
        ([x_input(shared_memory_region="r", shared_memory_byte_size=32, shared_memory_offset=240)], [],
         "runs past the end of region 'r' (256 bytes)"),
        ([x_input(shared_memory_byte_size=32)], [], "given without shared_memory_region"),
        ([x_input(shared_memory_region="r")], [], "shared_memory_byte_size: expected a byte count"),
        ([x_input(shared_memory_region=7, shared_memory_byte_size=32)], [], "expected a region name"),
        ([{**x_input(**whole), "data": [0.0] * 8}], [],
         "in shared memory (shared_memory_region) and in the request"),
        ([x_input(**whole)], [z_in], "unknown output(s) ['z']"),
        ([x_input(**whole)], [{"name": "y", "parameters": {"classification": 2, **whole}}],
         "shared_memory_region and classification cannot both be set"),
    ]
    for inputs, outputs, message in cases:
        answer = infer(server, inputs, outputs)
        assert answer.status_code == 400 and message in answer.json()["error"], (inputs, answer.text)
    # the output check: 2 rows x 3 FP32 need 24 bytes; 20 are too few, and nothing is written
    before = bytes(obj.buf[:256])
    small = {"name": "y", "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 20,
                                         "shared_memory_offset": 100}}
    answer = infer(server, [x_input(**whole)], [small])
    assert answer.status_code == 400
    assert "shared_memory_byte_size 20 is too small for the output's 24 bytes" in answer.json()["error"]
    assert bytes(obj.buf[:256]) == before


def test_inputs_in_shared_memory_are_bounded_like_a_body(server, objects, regions):
    """A region of a large (sparse) object cannot make the server read more than
    --max-request-bytes (64 MiB here) into memory for one request."""
    obj = objects(4096)
    os.truncate(f"/dev/shm/{obj.name}", 100 << 20)
    assert register(server, "big", key=key(obj), byte_size=100 << 20).status_code == 200
    answer = infer(server, [x_input(shared_memory_region="big", shared_memory_byte_size=100 << 20)])
    assert answer.status_code == 413
    assert "exceed the limit of 67108864 (--max-request-bytes)" in answer.json()["error"]


def test_an_object_shrunk_after_registering_is_an_error_not_a_crash(server, objects, regions):
    obj = objects(4096)
    assert register(server, "r", key=key(obj), byte_size=4096).status_code == 200
    os.truncate(f"/dev/shm/{obj.name}", 16)
    answer = infer(server, [x_input(shared_memory_region="r", shared_memory_byte_size=32)])
    assert answer.status_code == 400 and "now holds 16 bytes" in answer.json()["error"]
    os.truncate(f"/dev/shm/{obj.name}", 4096)  # grown back: the same region serves again
    ok = infer(server, [x_input(shared_memory_region="r", shared_memory_byte_size=32)])
    assert ok.status_code == 200, ok.text
    assert ok.json()["outputs"][0]["shape"] == [2, 3]


def test_grpc_refusals_carry_the_message(server, objects, regions):
    _, client = clients(server, "grpc")
    tensor = triton_grpc.InferInput("x", [2, 4], "FP32")
    tensor.set_shared_memory("missing", 32)
    with pytest.raises(triton_grpc.InferenceServerException) as info:
        client.infer("mlp", [tensor], model_version="1")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "no system shared memory region 'missing'" in info.value.message()
    with pytest.raises(triton_grpc.InferenceServerException, match="not a shared-memory object name"):
        client.register_system_shared_memory("r", "../etc/passwd", 8)


def test_off_by_default(mlp_server, mlp_file, objects):
    """Without --allow-client-shm every shared-memory call and parameter is refused (403 /
    PERMISSION_DENIED, naming the option) and the extension is not listed."""
    obj = objects(64)
    url = mlp_server.http_url
    assert "system_shared_memory" not in httpx.get(f"{url}/v2").json()["extensions"]
    for answer in (
        httpx.post(f"{url}/v2/systemsharedmemory/region/r/register", json={"key": key(obj), "byte_size": 8}),
        httpx.get(f"{url}/v2/systemsharedmemory/status"),
        httpx.post(f"{url}/v2/models/tiny/infer", json={"inputs": [{
            "name": "x", "datatype": "FP32", "shape": [1, 4],
            "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 16}}]}),
    ):
        assert answer.status_code == 403 and "--allow-client-shm" in answer.json()["error"]
    grpc = triton_grpc.InferenceServerClient(f"127.0.0.1:{mlp_server.grpc_port}")
    with pytest.raises(triton_grpc.InferenceServerException) as info:
        grpc.register_system_shared_memory("r", key(obj), 8)
    assert info.value.status() == "StatusCode.PERMISSION_DENIED"


def test_listed_when_on_and_refused_with_several_workers(server, tmp_path):
    assert "system_shared_memory" in httpx.get(f"{server.http_url}/v2").json()["extensions"]
    path = tmp_path / "m.onnx"
    onnx.save(mlp(), path)
    with pytest.raises(ValueError, match="a region registered with one worker"):
        ServerSettings(model_path=str(path), workers=2, allow_client_shm=True)
