"""Serve over TLS on both ports, with mutual TLS, and query over HTTPS and gRPC.

A real deployment passes its own PEM files (`flowserve serve repo --ssl-certfile
server.pem --ssl-keyfile server.key [--ssl-ca-certs clients-ca.pem]`). To run on its own,
this example makes a throwaway certificate authority with ``trustme`` (``pip install
trustme``), issues the server a certificate for 127.0.0.1 and a client one, starts
flowserve requiring client certificates, and queries it with flowserve's clients::

    python examples/serve_tls.py
"""

from __future__ import annotations

import pathlib
import tempfile

import numpy as np
import onnx
import trustme
from onnx import TensorProto, helper, numpy_helper

from flowserve.clients import TLS, GRPCClient, HTTPClient, InferenceServerError, ServerUnreachableError
from flowserve.server import InferenceServer, ServerSettings


def demo_model(path: pathlib.Path) -> pathlib.Path:
    w = numpy_helper.from_array(np.eye(4, 3, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "demo",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)
    return path


def certificates(folder: pathlib.Path) -> dict:
    """PEM files of a throwaway CA, a server certificate for 127.0.0.1 and a client's."""
    ca = trustme.CA()
    server, client = ca.issue_cert("127.0.0.1"), ca.issue_cert("client@example.test")
    files = {name: folder / f"{name}.pem" for name in ("ca", "server", "server_key", "client")}
    ca.cert_pem.write_to_path(files["ca"])
    server.cert_chain_pems[0].write_to_path(files["server"])
    server.private_key_pem.write_to_path(files["server_key"])
    client.private_key_and_cert_chain_pem.write_to_path(files["client"])  # key and certificate
    return {name: str(path) for name, path in files.items()}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        pem = certificates(folder)
        settings = ServerSettings(model_path=str(demo_model(folder / "demo.onnx")), http_port=0, grpc_port=0,
                                  log_level="warning", ssl_certfile=pem["server"], ssl_keyfile=pem["server_key"],
                                  ssl_ca_certs=pem["ca"])  # clients must show a certificate this CA signed
        with InferenceServer(settings).background() as server:
            url = server.http_url.replace("http://", "https://")
            tls = TLS(ca_file=pem["ca"], cert_file=pem["client"])
            x = np.arange(8, dtype=np.float32).reshape(2, 4)
            print(f"serving at {url} and grpcs://{server.grpc_address}")
            with HTTPClient(url, tls=tls) as https, GRPCClient(server.grpc_address, tls=tls) as grpcs:
                print("HTTPS  ->", https.infer("demo", {"x": x})["y"].tolist())
                print("gRPC   ->", grpcs.infer("demo", {"x": x})["y"].tolist(), "| health:", grpcs.health())
            try:
                HTTPClient(url, tls=TLS(ca_file=pem["ca"])).is_ready()  # no client certificate
            except (ServerUnreachableError, InferenceServerError) as exc:
                print("without a client certificate:", type(exc).__name__)


if __name__ == "__main__":
    main()
