"""flowserve.clients against a real server: sync, asyncio, gRPC, perf, isolation."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import numpy as np
import pytest

from flowserve.clients import (
    AsyncGRPCClient,
    AsyncHTTPClient,
    GRPCClient,
    HTTPClient,
    InferenceServerError,
    ServerUnreachableError,
)
from flowserve.clients.perf import run_load

from ..server.conftest import mlp_file, mlp_server, running_server  # noqa: F401 (fixtures)
from ..server.models import identity_all_types, sample


@pytest.fixture(scope="module")
def types_server(tmp_path_factory):
    import onnx

    path = tmp_path_factory.mktemp("types") / "types.onnx"
    onnx.save(identity_all_types(), path)
    with running_server(path) as server:
        yield server


def all_type_inputs():
    return {f"in_{t}": sample(t) for t in
            ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "BYTES")}


@pytest.mark.parametrize("make", [
    lambda s: HTTPClient(s.http_url),
    lambda s: HTTPClient(s.http_url, binary=False),
    lambda s: GRPCClient(s.grpc_address),
])
def test_sync_clients_round_trip_every_datatype(types_server, make):
    client = make(types_server)
    inputs = all_type_inputs()
    if isinstance(client, HTTPClient) and not client.binary:
        inputs.pop("in_BF16")  # JSON numbers would round-trip through float
        inputs["in_BF16"] = sample("BF16").astype(np.float32).astype(sample("BF16").dtype)
    outputs = client.infer("types", inputs)
    for name, array in inputs.items():
        got = outputs["out_" + name[3:]]
        assert got.dtype == array.dtype and got.shape == array.shape
        np.testing.assert_array_equal(got, array)
    client.close()


def test_sync_client_metadata_and_health(mlp_server):  # noqa: F811
    for client in (HTTPClient(mlp_server.http_url), GRPCClient(mlp_server.grpc_address)):
        assert client.is_live() and client.is_ready() and client.is_model_ready("tiny")
        assert not client.is_model_ready("nope")
        assert client.model_metadata("tiny")["inputs"][0]["shape"] == [-1, 4]
        assert client.model_config("tiny")["max_batch_size"] == 64
        assert client.server_metadata()["name"] == "flowserve"
        assert client.repository_index()[0]["name"] == "tiny"
        outputs = client.infer("tiny", {"x": np.ones((2, 4), np.float32)}, outputs=["y"])
        assert outputs["y"].shape == (2, 3)
        assert client.statistics("tiny")["model_stats"][0]["inference_count"] >= 2
        client.close()


def test_clear_exceptions(mlp_server):  # noqa: F811
    http, grpc_client = HTTPClient(mlp_server.http_url), GRPCClient(mlp_server.grpc_address)
    with pytest.raises(InferenceServerError) as info:
        http.infer("tiny", {"x": np.ones((1, 5), np.float32)})
    assert info.value.status == 400 and "shape [1, 5]" in info.value.message
    with pytest.raises(InferenceServerError) as info:
        grpc_client.infer("nope", {"x": np.ones((1, 4), np.float32)})
    assert info.value.status == "NOT_FOUND"
    with pytest.raises(ServerUnreachableError):
        HTTPClient("http://127.0.0.1:9", timeout_s=2).is_live()


def test_async_clients_many_concurrent_requests(mlp_server):  # noqa: F811
    x = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    reference = HTTPClient(mlp_server.http_url).infer("tiny", {"x": x})["y"]

    async def main():
        async with AsyncHTTPClient(mlp_server.http_url) as http, \
                AsyncGRPCClient(mlp_server.grpc_address) as grpc_client:
            calls = [(http if i % 2 else grpc_client).infer("tiny", {"x": x[i:i + 1]})
                     for i in range(40)]
            results = await asyncio.wait_for(asyncio.gather(*calls), 30)
            assert await http.is_ready() and await grpc_client.is_ready()
            with pytest.raises(InferenceServerError):
                await http.infer("nope", {"x": x[:1]})
        return np.concatenate([r["y"] for r in results])

    np.testing.assert_array_equal(asyncio.run(main()), reference)


def test_async_grpc_client_round_trips_types_large_messages_and_errors(types_server,
                                                                     mlp_file):  # noqa: F811
    """AsyncGRPCClient's own HTTP/2 channel: every datatype, a message larger than the
    server's stream window both ways, error codes, the token, an unreachable server."""
    inputs = all_type_inputs()
    big = np.array([[bytes([65 + i % 26]) * 20_000] * 3 for i in range(64)],
                   dtype=object)  # 3.8 MB of BYTES

    async def main():
        async with AsyncGRPCClient(types_server.grpc_address) as client:
            outputs = await client.infer("types", inputs)
            large = await client.infer("types", {**{name: sample(name[3:], rows=64)
                                                      for name in inputs}, "in_BYTES": big},
                                       outputs=["out_BYTES"])
            with pytest.raises(InferenceServerError) as missing:
                await client.infer("nope", {"x": np.ones((1, 4), np.float32)})
        with running_server(mlp_file, auth_token="tok") as server:
            x = {"x": np.ones((1, 4), np.float32)}
            async with AsyncGRPCClient(server.grpc_address) as client:
                with pytest.raises(InferenceServerError) as refused:
                    await client.infer("tiny", x)
            async with AsyncGRPCClient(server.grpc_address, token="tok") as client:
                assert (await client.infer("tiny", x))["y"].shape == (1, 3)
        with pytest.raises(ServerUnreachableError):
            await AsyncGRPCClient("127.0.0.1:9").is_ready()
        return outputs, large, missing.value, refused.value

    outputs, large, missing, refused = asyncio.run(main())
    for name, array in inputs.items():
        np.testing.assert_array_equal(outputs["out_" + name[3:]], array)
    np.testing.assert_array_equal(large["out_BYTES"], big)
    assert missing.status == "NOT_FOUND" and "nope" in missing.message
    assert refused.status == "UNAUTHENTICATED"


def test_auth_token_is_sent(mlp_file):  # noqa: F811
    with running_server(mlp_file, auth_token="tok") as server:
        x = {"x": np.ones((1, 4), np.float32)}
        with pytest.raises(InferenceServerError) as info:
            HTTPClient(server.http_url).infer("tiny", x)
        assert info.value.status == 401
        with pytest.raises(InferenceServerError) as info:
            GRPCClient(server.grpc_address).infer("tiny", x)
        assert info.value.status == "UNAUTHENTICATED"
        assert HTTPClient(server.http_url, token="tok").infer("tiny", x)["y"].shape == (1, 3)
        assert GRPCClient(server.grpc_address, token="tok").infer("tiny", x)["y"].shape == (1, 3)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_reports_and_plots(mlp_server, tmp_path, protocol):  # noqa: F811
    url = mlp_server.http_url if protocol == "http" else mlp_server.grpc_address
    report = asyncio.run(run_load(url, "tiny", concurrency=4, duration_s=1.0,
                                  protocol=protocol, warmup_s=0.1))
    assert report.errors == 0 and report.requests > 50
    assert 0 < report.percentile_ms(50) <= report.percentile_ms(99)
    assert "p99" in report.summary()
    report.plot(str(tmp_path / "lat.png"))
    assert (tmp_path / "lat.png").read_bytes()[:4] == b"\x89PNG"


def test_perf_cli(mlp_server, tmp_path):  # noqa: F811
    plot = tmp_path / "perf.png"
    command = [sys.executable, "-c", "import typer; from flowserve.clients.cli import perf; "
               "typer.run(perf)", mlp_server.http_url, "--model", "tiny", "--concurrency", "2",
               "--duration", "0.5", "--plot", str(plot)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "throughput" in done.stdout and "p50" in done.stdout and plot.exists()
    bad = subprocess.run(command[:4] + ["--model", "nope", "--duration", "0.2"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "unknown model" in bad.stderr


def test_clients_import_no_other_part_of_flowserve():
    """Every import in clients/ is the standard library, a dependency, clients itself or
    the protocol it shares with the server (``flowserve.protocol``)."""
    import ast
    import pathlib

    import flowserve.clients

    folder = pathlib.Path(flowserve.clients.__file__).parent
    for source in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith("flowserve") or name.startswith(
                    ("flowserve.clients", "flowserve.protocol")), f"{source.name} imports {name}"
