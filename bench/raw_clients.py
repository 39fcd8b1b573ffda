"""The serving benches' lean clients: each call sends a request encoded once and decodes
every answer, with as little client CPU as the protocol allows, so that a round trip shows
the server. HTTP/1.1 through ``HTTPClient``'s raw socket; gRPC through ``RawGrpc`` (HTTP/2
frames by hand on one socket) or grpcio's blocking stub (what tritonclient users run)::

    call = raw_h2_grpc_call("127.0.0.1:8001", "mlp", np.zeros((1, 64), np.float32))
    call()
"""

from __future__ import annotations

import socket
import struct

import hpack
import numpy as np

from flowserve.clients import GRPCClient, HTTPClient, grpc_client, rest
from flowserve.protocol import protos
from flowserve.clients import http2_wire as wire


def raw_http_call(url: str, model: str, x: np.ndarray, binary: bool):
    """A call sending the infer request encoded once, decoding every answer.

    ``HTTPClient.request`` is a raw-socket keep-alive HTTP/1.1 client (it
    reconnects when a server closed the idle connection between rounds).
    """
    client = HTTPClient(url)
    body, headers = rest.encode_infer({"x": x}, None, binary)
    path = rest.model_path(model, "", "/infer")

    def call():
        status, answer_headers, data = client.request("POST", path, body, headers)
        outputs = rest.decode_infer(status, answer_headers.get("inference-header-content-length"),
                                    data)
        assert outputs["y"].shape == (len(x), 10)

    return call


def raw_grpc_call(address: str, model: str, x: np.ndarray):
    """A gRPC call with the request message built once, decoding every answer."""
    client = GRPCClient(address)
    message = grpc_client.encode_infer(model, {"x": x}, None, "", "")

    def call():
        outputs = grpc_client.decode_infer(client.call("ModelInfer", message))
        assert outputs["y"].shape == (len(x), 10)

    return call


class RawGrpc:
    """A gRPC client as lean as the raw HTTP/1.1 one: HTTP/2 frames written by hand on one
    socket, the header block HPACK-indexed after the first call (as grpc-core sends it),
    windows granted in large steps, every answer decoded."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(wire.PREFACE + self._frame(wire.SETTINGS, 0, 0, struct.pack(
            ">HL", wire.SETTINGS_INITIAL_WINDOW_SIZE, 1 << 30))
            + self._window_update(1 << 30))
        self.encoder, self.buffer, self.stream, self.received = hpack.Encoder(), b"", 1, 0
        self.headers = [(":method", "POST"), (":scheme", "http"), (":authority", address),
                        (":path", f"/{protos.SERVICE_NAME}/ModelInfer"), ("te", "trailers"),
                        ("content-type", "application/grpc")]

    _frame = staticmethod(wire.frame)

    def _window_update(self, size: int) -> bytes:
        return self._frame(wire.WINDOW_UPDATE, 0, 0, struct.pack(">L", size))

    def infer(self, body: bytes) -> bytes:
        """One unary ModelInfer with ``body`` (the serialized request); the response bytes."""
        stream, self.stream = self.stream, self.stream + 2
        self.sock.sendall(self._frame(wire.HEADERS, wire.END_HEADERS, stream,
                                      self.encoder.encode(self.headers))
                          + self._frame(wire.DATA, wire.END_STREAM, stream,
                                        struct.pack(">BL", 0, len(body)) + body))
        data = b""
        while True:
            kind, flags, stream_id, payload = self._read()
            if kind == wire.SETTINGS and not flags & wire.ACK:
                self.sock.sendall(self._frame(wire.SETTINGS, wire.ACK, 0))
            elif kind == wire.PING and not flags & wire.ACK:
                self.sock.sendall(self._frame(wire.PING, wire.ACK, 0, payload))
            elif kind == wire.GOAWAY:
                raise ConnectionError(f"GOAWAY from the server: {payload[4:]!r}")
            elif kind == wire.DATA and stream_id == stream:
                data += payload
            elif kind in (wire.HEADERS, wire.RST_STREAM) and stream_id == stream and (
                    flags & wire.END_STREAM or kind == wire.RST_STREAM):
                break
        self.received += len(data)
        if self.received > 1 << 29:
            self.sock.sendall(self._window_update(self.received))
            self.received = 0
        return data[5:]

    def _read(self):
        while (got := wire.read_frame(self.buffer, 0)) is None:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buffer += chunk
        kind, flags, stream_id, start, end = got
        payload, self.buffer = self.buffer[start:end], self.buffer[end:]
        return kind, flags, stream_id, payload


def raw_h2_grpc_call(address: str, model: str, x: np.ndarray):
    """A gRPC call through ``RawGrpc``, the request serialized once, every answer decoded."""
    client = RawGrpc(address)
    body = grpc_client.encode_infer(model, {"x": x}, None, "", "").SerializeToString()

    def call():
        reply = protos.ModelInferResponse.FromString(client.infer(body))
        outputs = grpc_client.decode_infer(reply)
        assert outputs["y"].shape == (len(x), 10)

    return call
