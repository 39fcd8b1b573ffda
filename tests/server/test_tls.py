"""TLS on both ports (--ssl-certfile/--ssl-keyfile) and mutual TLS (--ssl-ca-certs), with
certificates from a throwaway CA (trustme) and third-party clients beside flowserve's."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import sys

import grpc
import httpx
import numpy as np
import onnx
import pytest
import tritonclient.grpc as triton_grpc

from flowserve.clients import AsyncGRPCClient, AsyncHTTPClient, GRPCClient, HTTPClient, TLS
from flowserve.clients.errors import ServerUnreachableError
from flowserve.server import InferenceServer, ServerSettings
from flowserve.server.errors import ServerConfigError

from .conftest import running_server
from .models import mlp_reference

trustme = pytest.importorskip("trustme", reason="trustme makes the test certificates")

X = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """PEM files: the CA, the server's certificate and key (for 127.0.0.1), a client's."""
    root = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server, client = ca.issue_cert("127.0.0.1", "localhost"), ca.issue_cert("client@flowserve.test")
    files = {"ca": root / "ca.pem", "cert": root / "server.pem", "key": root / "server.key",
             "client": root / "client.pem"}
    ca.cert_pem.write_to_path(files["ca"])
    server.cert_chain_pems[0].write_to_path(files["cert"])
    server.private_key_pem.write_to_path(files["key"])
    client.private_key_and_cert_chain_pem.write_to_path(files["client"])
    return {k: str(v) for k, v in files.items()}


@pytest.fixture(scope="module")
def tls_server(mlp_file, pki):
    with running_server(mlp_file, ssl_certfile=pki["cert"], ssl_keyfile=pki["key"]) as server:
        yield server


def _https(server) -> str:
    return server.http_url.replace("http://", "https://")


def test_every_client_speaks_tls_to_both_ports(tls_server, mlp_file, pki):
    expected = mlp_reference(onnx.load(mlp_file), X)
    tls = TLS(ca_file=pki["ca"])
    with HTTPClient(_https(tls_server), tls=tls) as http, GRPCClient(tls_server.grpc_address, tls=tls) as rpc:
        for client in (http, rpc):
            np.testing.assert_allclose(client.infer("tiny", {"x": X})["y"], expected, rtol=1e-6)
        assert rpc.health() == "SERVING"

    async def both_async():
        async with AsyncHTTPClient(_https(tls_server), tls=tls) as http, \
                AsyncGRPCClient(tls_server.grpc_address, tls=tls) as rpc:
            return [(await c.infer("tiny", {"x": X}))["y"] for c in (http, rpc)]

    for answer in asyncio.run(both_async()):
        np.testing.assert_allclose(answer, expected, rtol=1e-6)


def test_large_tensors_go_out_as_parts_over_tls_too(mlp_file, pki):
    """A body of 64 KiB or more leaves the clients as its parts (on a TLS socket, one
    ``sendall`` each): the server gets every value."""
    x = np.random.default_rng(3).standard_normal((20000, 4)).astype(np.float32)  # 312 KiB
    expected, tls = mlp_reference(onnx.load(mlp_file), x), TLS(ca_file=pki["ca"])
    with running_server(mlp_file, ssl_certfile=pki["cert"], ssl_keyfile=pki["key"],
                        max_batch_size=0) as server:
        with HTTPClient(_https(server), tls=tls) as http:
            np.testing.assert_allclose(http.infer("tiny", {"x": x})["y"], expected, rtol=1e-5, atol=1e-5)

        async def infer():
            async with AsyncHTTPClient(_https(server), tls=tls) as http:
                return (await http.infer("tiny", {"x": x}))["y"]

        np.testing.assert_allclose(asyncio.run(infer()), expected, rtol=1e-5, atol=1e-5)


def test_third_party_clients_over_tls(tls_server, pki):
    ready = httpx.get(_https(tls_server) + "/v2/health/ready", verify=ssl.create_default_context(cafile=pki["ca"]),
                      timeout=10)
    assert ready.json() == {"ready": True}
    client = triton_grpc.InferenceServerClient(tls_server.grpc_address, ssl=True, root_certificates=pki["ca"])
    assert client.is_server_ready() and client.is_model_ready("tiny")
    client.close()


def test_a_server_nobody_vouches_for_is_refused(tls_server):
    with pytest.raises(ServerUnreachableError, match="CERTIFICATE_VERIFY_FAILED"):
        HTTPClient(_https(tls_server)).is_ready()  # the system's CAs do not know the test CA
    with pytest.raises(httpx.ConnectError):
        httpx.get(_https(tls_server) + "/v2/health/live", timeout=10)
    channel = grpc.insecure_channel(tls_server.grpc_address)  # cleartext to a TLS port
    with pytest.raises(grpc.RpcError) as error:
        channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10)
    assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    channel.close()


def test_mutual_tls_lets_in_only_clients_with_a_certificate(mlp_file, pki):
    with running_server(mlp_file, ssl_certfile=pki["cert"], ssl_keyfile=pki["key"],
                        ssl_ca_certs=pki["ca"]) as server:
        member = TLS(ca_file=pki["ca"], cert_file=pki["client"])
        with HTTPClient(_https(server), tls=member) as http, GRPCClient(server.grpc_address, tls=member) as rpc:
            assert http.is_ready() and rpc.is_ready()
        stranger = TLS(ca_file=pki["ca"])
        with pytest.raises(ServerUnreachableError):  # the server ends the handshake
            HTTPClient(_https(server), tls=stranger).is_ready()
        with pytest.raises(ServerUnreachableError, match="UNAVAILABLE"):
            GRPCClient(server.grpc_address, tls=stranger, timeout_s=10).is_ready()


def test_unusable_certificate_files_are_refused_before_serving(mlp_file, pki, tmp_path):
    not_pem = tmp_path / "junk.pem"
    not_pem.write_text("not a certificate")
    with pytest.raises(ServerConfigError, match="--ssl-certfile .*expected a PEM certificate chain"):
        InferenceServer(ServerSettings(model_path=str(mlp_file), ssl_certfile=str(not_pem)))
    with pytest.raises(ServerConfigError, match="--ssl-ca-certs .*expected PEM CA certificates"):
        InferenceServer(ServerSettings(model_path=str(mlp_file), ssl_certfile=pki["cert"],
                                       ssl_keyfile=pki["key"], ssl_ca_certs=str(not_pem)))
    with pytest.raises(ValueError, match="needs --ssl-certfile"):
        ServerSettings(model_path=str(mlp_file), ssl_keyfile=pki["key"])
    cli = subprocess.run([sys.executable, "-m", "flowserve.server", str(mlp_file), "--ssl-certfile",
                          str(not_pem), "--http-port", "0", "--grpc-port", "0"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1 and "error: --ssl-certfile" in cli.stderr, cli.stderr
    from_env = subprocess.run([sys.executable, "-m", "flowserve.server", str(mlp_file), "--http-port", "0",
                               "--grpc-port", "0"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "FLOWSERVE_SSL_CERTFILE": str(not_pem)})
    assert from_env.returncode == 1 and "error: --ssl-certfile" in from_env.stderr, from_env.stderr



def test_a_stalled_tls_handshake_is_closed_within_the_header_timeout(mlp_file, pki):
    """A connection that opens and never says hello holds no slot for long (the event
    loop's own bound would be 60 s); the recv timeout is far above the server's 0.5 s."""
    with running_server(mlp_file, ssl_certfile=pki["cert"], ssl_keyfile=pki["key"],
                        header_timeout_s=0.5) as server:
        for port in (server.http_port, server.grpc_port):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                try:
                    assert sock.recv(1) == b"", f"port {port} answered a client that sent nothing"
                except ConnectionResetError:
                    pass  # closed with a reset: as good
        assert HTTPClient(_https(server), tls=TLS(ca_file=pki["ca"])).is_ready()  # still serving

@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_drives_a_tls_server(tls_server, pki, protocol):
    url = _https(tls_server) if protocol == "http" else tls_server.grpc_address
    done = subprocess.run([sys.executable, "-c", "import typer; from flowserve.clients.cli import perf; "
                           "typer.run(perf)", url, "--model", "tiny", "--protocol", protocol, "--duration", "0.3",
                           "--ca-file", pki["ca"]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "throughput" in done.stdout and ", 0 errors" in done.stdout, done.stdout
