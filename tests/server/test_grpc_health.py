"""gRPC's standard health service (grpc.health.v1), called with grpcio's own client stubs."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import grpc
import pytest
from google.protobuf import descriptor_pb2

from flowserve.clients import GRPCClient
from flowserve.clients.errors import InferenceServerError
from flowserve.protocol import protos
from flowserve.protocol.protos import health
from flowserve.server.grpc.app import HealthServicer

from .conftest import running_server

health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2", reason="grpcio-health-checking is the client")
health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def _proto(descriptor) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    descriptor.CopyToProto(proto)
    return proto


def test_descriptor_matches_grpcs_published_health_proto():
    ours = _proto(health._POOL.FindFileByName("grpc/health/v1/health.proto"))
    theirs = _proto(health_pb2.DESCRIPTOR)
    assert ours.package == theirs.package
    assert [m.SerializeToString() for m in ours.message_type] == [m.SerializeToString() for m in theirs.message_type]
    assert [(m.name, m.input_type, m.output_type, m.server_streaming) for m in ours.service[0].method] == \
        [(m.name, m.input_type, m.output_type, m.server_streaming) for m in theirs.service[0].method]


@pytest.fixture
def stub():
    channels = []

    def make(server):
        channels.append(grpc.insecure_channel(server.grpc_address))
        return health_pb2_grpc.HealthStub(channels[-1])

    yield make
    for channel in channels:
        channel.close()


def _check(health_stub, service: str):
    return health_stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def test_check_reports_the_server_and_each_model(repo_server, mlp_server, stub):
    repo, single = stub(repo_server), stub(mlp_server)
    assert _check(single, "") == SERVING
    assert _check(single, "inference.GRPCInferenceService") == SERVING
    assert _check(single, "tiny") == SERVING
    # the repository holds a model that fails to load: the server is not ready, as ServerReady says
    assert _check(repo, "") == NOT_SERVING
    assert _check(repo, "mlp") == SERVING
    assert _check(repo, "broken") == NOT_SERVING
    with pytest.raises(grpc.RpcError) as error:
        _check(repo, "no-such-model")
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown service 'no-such-model'" in error.value.details()


def test_list_gives_the_server_and_every_model(repo_server, stub):
    listed = stub(repo_server).List(health_pb2.HealthListRequest(), timeout=10).statuses
    assert {name: entry.status for name, entry in listed.items()} == {
        "": NOT_SERVING, "inference.GRPCInferenceService": NOT_SERVING, "mlp": SERVING, "types": SERVING,
        "broken": NOT_SERVING}


def test_probes_need_no_token_where_inference_models_and_the_listing_do(mlp_file, stub):
    """The server's own status is open; a model's (which names the models) is not."""
    with running_server(mlp_file, auth_token="s3cret") as server:
        probe = stub(server)
        assert _check(probe, "") == SERVING
        assert next(probe.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)).status == SERVING
        token = [("authorization", "Bearer s3cret")]
        assert probe.Check(health_pb2.HealthCheckRequest(service="tiny"), timeout=10,
                           metadata=token).status == SERVING
        refused = [lambda: _check(probe, "tiny"), lambda: _check(probe, "no-such-model"),
                   lambda: next(probe.Watch(health_pb2.HealthCheckRequest(service="tiny"), timeout=10)),
                   lambda: probe.List(health_pb2.HealthListRequest(), timeout=10)]
        for call in refused:
            with pytest.raises(grpc.RpcError) as error:
                call()
            assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as error:
            grpc.insecure_channel(server.grpc_address).unary_unary(
                "/inference.GRPCInferenceService/ModelReady")(b"", timeout=10)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_watch_follows_a_model_unloaded_and_loaded_again(repository, stub):
    with running_server(repository, allow_model_control=True) as server:
        watch = stub(server).Watch(health_pb2.HealthCheckRequest(service="mlp"), timeout=30)
        unknown = stub(server).Watch(health_pb2.HealthCheckRequest(service="later"), timeout=30)
        assert next(watch).status == SERVING
        assert next(unknown).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        control = grpc.insecure_channel(server.grpc_address)
        unload = control.unary_unary("/inference.GRPCInferenceService/RepositoryModelUnload")
        load = control.unary_unary("/inference.GRPCInferenceService/RepositoryModelLoad")
        unload(protos.RepositoryModelUnloadRequest(model_name="mlp").SerializeToString(), timeout=30)
        assert next(watch).status == NOT_SERVING
        load(protos.RepositoryModelLoadRequest(model_name="mlp").SerializeToString(), timeout=60)
        assert next(watch).status == SERVING
        unknown.cancel()
        control.close()


def test_shutdown_turns_watches_not_serving_and_ends_them(mlp_file, stub):
    with running_server(mlp_file) as server:
        watch = stub(server).Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert next(watch).status == SERVING
        server.stop()  # asks the server's loop to shut down; returns at once
        assert [r.status for r in watch] == [NOT_SERVING]  # then the stream ends with OK


# a CPU hog beside the server (as bench/busy.py is beside a benchmark), a process of its own
# (not forked: a fork of a process running grpc cancels its calls), that ends by itself
HOG = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"


def test_every_watch_open_at_a_shutdown_under_load_sends_not_serving(mlp_file):
    """Forty watches on four connections and a busy core beside the server; the shutdown is
    asked for as soon as each watch has its first answer (on the server, writes may still
    be completing): every one is sent NOT_SERVING, then ends with OK. (A call grpc-core
    has taken but not yet handed to the server when the shutdown starts is cancelled by
    grpc.aio's stop: only watches the server has answered are open to it.)"""
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        with running_server(mlp_file) as server:
            channels = [grpc.insecure_channel(server.grpc_address) for _ in range(4)]
            for channel in channels:
                grpc.channel_ready_future(channel).result(timeout=30)
            stubs = [health_pb2_grpc.HealthStub(channel) for channel in channels]
            watches = [stubs[i % 4].Watch(health_pb2.HealthCheckRequest(service="" if i % 2 else "tiny"),
                                          timeout=60) for i in range(40)]
            assert {next(watch).status for watch in watches} == {SERVING}
            server.stop()
            assert [[r.status for r in watch] for watch in watches] == [[NOT_SERVING]] * 40
            for channel in channels:
                channel.close()
    finally:
        hog.kill()
        hog.wait(30)


def test_grpc_client_health(repo_server):
    with GRPCClient(repo_server.grpc_address) as client:
        assert (client.health(), client.health("mlp"), client.health("broken")) == (
            "NOT_SERVING", "SERVING", "NOT_SERVING")
        with pytest.raises(InferenceServerError, match="unknown service 'nope'"):
            client.health("nope")


class _ReadyPlane:
    """What the health service asks of a data plane: the server is ready."""

    def ready(self) -> bool:
        return True


def test_a_shutdown_during_a_watchs_write_still_sends_not_serving():
    """The race of a full-suite run (``[] == [2]``): the shutdown starts while the watch's
    SERVING message is being written (its generator suspended at the yield); the watch
    must still send NOT_SERVING before it ends."""
    async def watch() -> list:
        closing = asyncio.Event()
        checker = HealthServicer(_ReadyPlane(), closing, authorize=lambda context: None)
        statuses = checker.Watch(health_pb2.HealthCheckRequest(service=""), None)
        sent = [(await anext(statuses)).status]
        closing.set()  # while the first message is on its way
        sent += [response.status async for response in statuses]
        return sent

    assert asyncio.run(watch()) == [SERVING, NOT_SERVING]
