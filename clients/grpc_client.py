"""gRPC clients of ``inference.GRPCInferenceService``: ``GRPCClient`` and ``AsyncGRPCClient``.

numpy in, numpy out (tensors travel as raw contents); server errors raise
``InferenceServerError`` whose ``status`` is the gRPC code name::

    from flowserve.clients import GRPCClient
    with GRPCClient("127.0.0.1:8001") as client:
        outputs = client.infer("mlp", {"x": np.ones((1, 64), np.float32)})
"""

from __future__ import annotations

import asyncio
from typing import Optional

import grpc
import numpy as np
from google.protobuf.descriptor import FieldDescriptor

from flowserve.protocol import protos
from flowserve.protocol.protos import health
from flowserve.protocol.tensors import array_to_raw

from ._grpc_channel import GrpcChannel
from .errors import InferenceServerError, ServerUnreachableError
from .tensors import array_from_raw, datatype_of
from .tls import TLS

_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def encode_infer(model: str, inputs: dict, outputs: Optional[list], version: str,
                 request_id: str):
    """A ``ModelInferRequest`` with raw input contents."""
    message = protos.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    for name, value in inputs.items():
        array = np.asarray(value)
        tensor = message.inputs.add()
        tensor.name, tensor.datatype = name, datatype_of(array)
        tensor.shape.extend(array.shape)
        message.raw_input_contents.append(array_to_raw(array))
    for name in outputs or ():
        message.outputs.add().name = name
    return message


def decode_infer(message) -> dict:
    """``{output name: array}`` from a ``ModelInferResponse``."""
    return {
        tensor.name: array_from_raw(raw, tensor.datatype, list(tensor.shape))
        for tensor, raw in zip(message.outputs, message.raw_output_contents)
    }


def _as_client_error(exc: grpc.RpcError) -> Exception:
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE and "connect" in (exc.details() or "").lower():
        return ServerUnreachableError(exc.details())
    return InferenceServerError(exc.details() or str(code), code.name)


def _stubs(channel, method_factory) -> dict:
    stubs = {}
    for name, (request_cls, response_cls, streaming) in protos.METHODS.items():
        if streaming:
            continue
        stubs[name] = method_factory(
            f"/{protos.SERVICE_NAME}/{name}", request_serializer=request_cls.SerializeToString,
            response_deserializer=response_cls.FromString)
    return stubs


class GRPCClient:
    """Blocking gRPC client (thread-safe; one channel)."""

    def __init__(self, address: str, token: Optional[str] = None, timeout_s: float = 60.0,
                 tls: Optional[TLS] = None):
        self._channel = (grpc.insecure_channel(address, options=_OPTIONS) if tls is None else
                         grpc.secure_channel(address, tls.grpc_credentials(), options=_OPTIONS))
        self._stubs = _stubs(self._channel, self._channel.unary_unary)
        self._stubs["Check"] = self._channel.unary_unary(
            f"/{health.SERVICE_NAME}/Check", request_serializer=health.HealthCheckRequest.SerializeToString,
            response_deserializer=health.HealthCheckResponse.FromString)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self.timeout_s = timeout_s

    def call(self, method: str, request):
        """Call RPC ``method`` with a request message; its response message."""
        try:
            return self._stubs[method](request, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _as_client_error(exc) from None

    def is_live(self) -> bool:
        return self.call("ServerLive", protos.ServerLiveRequest()).live

    def is_ready(self) -> bool:
        return self.call("ServerReady", protos.ServerReadyRequest()).ready

    def health(self, service: str = "") -> str:
        """gRPC's standard health check (``grpc.health.v1.Health/Check``) of the server
        (``""``) or a model: ``"SERVING"`` or ``"NOT_SERVING"``."""
        return health.STATUSES[self.call("Check", health.HealthCheckRequest(service=service)).status]

    def is_model_ready(self, model: str, version: str = "") -> bool:
        return self.call("ModelReady", protos.ModelReadyRequest(name=model, version=version)).ready

    def server_metadata(self) -> dict:
        return _to_dict(self.call("ServerMetadata", protos.ServerMetadataRequest()))

    def model_metadata(self, model: str, version: str = "") -> dict:
        request = protos.ModelMetadataRequest(name=model, version=version)
        return _to_dict(self.call("ModelMetadata", request))

    def model_config(self, model: str, version: str = "") -> dict:
        request = protos.ModelConfigRequest(name=model, version=version)
        return _to_dict(self.call("ModelConfig", request).config)

    def statistics(self, model: str = "", version: str = "") -> dict:
        request = protos.ModelStatisticsRequest(name=model, version=version)
        return _to_dict(self.call("ModelStatistics", request))

    def repository_index(self, ready: bool = False) -> list:
        answer = self.call("RepositoryIndex", protos.RepositoryIndexRequest(ready=ready))
        return _to_dict(answer).get("models", [])

    def load_model(self, model: str) -> None:
        self.call("RepositoryModelLoad", protos.RepositoryModelLoadRequest(model_name=model))

    def unload_model(self, model: str) -> None:
        self.call("RepositoryModelUnload", protos.RepositoryModelUnloadRequest(model_name=model))

    def infer(self, model: str, inputs: dict, outputs: Optional[list] = None,
              version: str = "", request_id: str = "") -> dict:
        """Run ``model`` on ``{name: array}``; returns ``{output name: array}``."""
        message = encode_infer(model, inputs, outputs, version, request_id)
        return decode_infer(self.call("ModelInfer", message))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "GRPCClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncGRPCClient:
    """asyncio gRPC client for ``infer`` and health checks, on a lean HTTP/2 channel of its
    own (``_grpc_channel``: one connection, calls multiplexed) rather than ``grpc.aio``,
    whose per-call CPU would otherwise be most of what a load generator measures."""

    def __init__(self, address: str, token: Optional[str] = None, timeout_s: float = 60.0,
                 tls: Optional[TLS] = None):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"address: expected HOST:PORT, got {address!r}")
        self._channel = GrpcChannel(host.strip("[]"), int(port), tls.context("h2") if tls else None)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout_s = timeout_s

    async def call(self, method: str, request):
        """Call RPC ``method`` with a request message; its response message."""
        _, response_cls, _ = protos.METHODS[method]
        try:
            status, message, payload = await self._channel.unary(
                f"/{protos.SERVICE_NAME}/{method}", request.SerializeToString(),
                self._metadata, self.timeout_s)
        except asyncio.TimeoutError:
            raise InferenceServerError(f"{method}: no answer within {self.timeout_s:g} s",
                                       "DEADLINE_EXCEEDED") from None
        if status != 0:
            raise InferenceServerError(message or f"{method} failed",
                                       _CODE_NAMES.get(status, str(status)))
        return response_cls.FromString(payload)

    async def is_ready(self) -> bool:
        return (await self.call("ServerReady", protos.ServerReadyRequest())).ready

    async def model_metadata(self, model: str, version: str = "") -> dict:
        request = protos.ModelMetadataRequest(name=model, version=version)
        return _to_dict(await self.call("ModelMetadata", request))

    async def model_config(self, model: str, version: str = "") -> dict:
        request = protos.ModelConfigRequest(name=model, version=version)
        return _to_dict((await self.call("ModelConfig", request)).config)

    async def infer(self, model: str, inputs: dict, outputs: Optional[list] = None,
                    version: str = "", request_id: str = "") -> dict:
        """Run ``model`` on ``{name: array}``; returns ``{output name: array}``."""
        message = encode_infer(model, inputs, outputs, version, request_id)
        return decode_infer(await self.call("ModelInfer", message))

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncGRPCClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _to_dict(message) -> dict:
    """A message as plain Python values (64-bit integers stay ints, enums become names)."""
    return {field.name: _field_value(field, value) for field, value in message.ListFields()}


def _field_value(field, value):
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {key: _scalar(value_field, item) for key, item in value.items()}
    if _is_repeated(field):
        return [_scalar(field, item) for item in value]
    return _scalar(field, value)


def _is_repeated(field) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf >= 5.28; ``label`` is gone in 7
        return field.is_repeated
    return field.label == FieldDescriptor.LABEL_REPEATED


def _scalar(field, value):
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _to_dict(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_number[value].name
    return value
