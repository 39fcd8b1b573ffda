"""The gRPC front end: ``inference.GRPCInferenceService`` over the ``DataPlane``.

Each RPC translates its message, calls the data plane and translates back;
``ServerError``s leave through one table from HTTP status to gRPC code::

    server = build_grpc_server(plane, "127.0.0.1:8001")
    await server.start()
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging

import grpc
from google.protobuf import json_format

from flowserve.clients import protos  # the one copy of the wire protocol
from .dataplane import DataPlane
from .errors import InvalidRequestError, ServerError, UnauthorizedError
from .datatypes import OFFLOAD_BYTES, DecodeLimits
from .grpc_codec import decode_infer_request, encode_infer_response

log = logging.getLogger("flowserve.server")

GRPC_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
    500: grpc.StatusCode.INTERNAL,
}
OPEN_METHODS = ("ServerLive", "ServerReady")


class InferenceServicer:
    """One coroutine per RPC of ``GRPCInferenceService``."""

    def __init__(self, plane: DataPlane):
        self.plane = plane
        self.limits = DecodeLimits(plane.settings.max_bytes_elements,
                                   plane.settings.max_json_elements)

    async def ServerLive(self, request, context):
        return protos.ServerLiveResponse(live=self.plane.live())

    async def ServerReady(self, request, context):
        return protos.ServerReadyResponse(ready=self.plane.ready())

    async def ModelReady(self, request, context):
        return protos.ModelReadyResponse(ready=self.plane.model_ready(request.name,
                                                                      request.version))

    async def ServerMetadata(self, request, context):
        return protos.ServerMetadataResponse(**self.plane.server_metadata())

    async def ModelMetadata(self, request, context):
        metadata = self.plane.model_metadata(request.name, request.version)
        metadata.pop("parameters", None)  # not in KServe's ModelMetadataResponse; ModelConfig has them
        return json_format.ParseDict(metadata, protos.ModelMetadataResponse())

    async def ModelInfer(self, request, context):
        response = await self.plane.infer(await self._decode(request))
        return encode_infer_response(response)

    async def _decode(self, request):
        """Decode on the loop, or in a worker thread for a large message (BYTES elements
        are parsed one by one), so health checks keep being answered."""
        if request.ByteSize() > OFFLOAD_BYTES:
            return await asyncio.to_thread(decode_infer_request, request, self.limits)
        return decode_infer_request(request, self.limits)

    async def ModelStreamInfer(self, request_iterator, context):
        """Each message gets its own response: its outputs, or its error (the stream goes on)."""
        async for request in request_iterator:
            try:
                response = await self.plane.infer(await self._decode(request))
                yield protos.ModelStreamInferResponse(
                    infer_response=encode_infer_response(response))
            except Exception as exc:
                yield protos.ModelStreamInferResponse(error_message=_message(exc),
                                                      infer_response=_echo(request))

    async def ModelConfig(self, request, context):
        config = self.plane.model_config(request.name, request.version)
        message = protos.ModelConfigResponse()
        json_format.ParseDict(config, message.config, ignore_unknown_fields=True)
        return message

    async def ModelStatistics(self, request, context):
        stats = self.plane.statistics(request.name, request.version)
        return json_format.ParseDict(stats, protos.ModelStatisticsResponse())

    async def RepositoryIndex(self, request, context):
        rows = self.plane.repository_index(request.ready)
        return json_format.ParseDict({"models": rows}, protos.RepositoryIndexResponse())

    async def RepositoryModelLoad(self, request, context):
        _refuse_parameters(request)
        await self.plane.load_model(request.model_name)
        return protos.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request, context):
        _refuse_parameters(request)
        await self.plane.unload_model(request.model_name)
        return protos.RepositoryModelUnloadResponse()


def _message(exc: Exception) -> str:
    """What a client is told of ``exc``: a ``ServerError``'s message, else no internals."""
    if isinstance(exc, ServerError):
        return str(exc)
    log.error("unexpected error in a gRPC call", exc_info=exc)
    return "internal error"


def _code(exc: Exception) -> grpc.StatusCode:
    status = exc.status if isinstance(exc, ServerError) else 500
    return GRPC_CODES.get(status, grpc.StatusCode.INTERNAL)


def _echo(request):
    """A response naming the request a stream error belongs to (model, version, id)."""
    return protos.ModelInferResponse(model_name=request.model_name,
                                     model_version=request.model_version, id=request.id)


def _refuse_parameters(request) -> None:
    if len(request.parameters):
        raise InvalidRequestError(
            "parameters: refused; models load only from files in the repository")


def _unary(method, name: str, token: str | None):
    @functools.wraps(method)
    async def handler(request, context):
        try:
            _authorize(context, name, token)
            return await method(request, context)
        except Exception as exc:  # ServerErrors with their code; anything else INTERNAL
            await context.abort(_code(exc), _message(exc))

    return handler


def _streaming(method, name: str, token: str | None):
    @functools.wraps(method)
    async def handler(request_iterator, context):
        try:
            _authorize(context, name, token)
        except ServerError as exc:
            await context.abort(GRPC_CODES[exc.status], str(exc))
        async for response in method(request_iterator, context):
            yield response

    return handler


def _authorize(context, name: str, token: str | None) -> None:
    if token is None or name in OPEN_METHODS:
        return
    metadata = dict(context.invocation_metadata() or ())
    given = str(metadata.get("authorization", "")).encode()
    if not hmac.compare_digest(given, f"Bearer {token}".encode()):
        raise UnauthorizedError("authorization: missing or wrong bearer token")


# Triton's server-side keepalive defaults (tritonserver --grpc-keepalive-*): tritonclient
# channels configured for Triton keep their pings within what is accepted here.
KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", 7_200_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.max_pings_without_data", 2),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 300_000),
    ("grpc.http2.max_ping_strikes", 2),
)


def server_options(max_request_bytes: int, reuse_port: bool = False) -> list[tuple]:
    """The channel options of the gRPC server: message sizes as ``--max-request-bytes``
    allows (responses unbounded, as Triton's), Triton's keepalive policy, and
    ``SO_REUSEPORT`` only when several worker processes share the port."""
    return [("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", int(reuse_port)),
            *KEEPALIVE_OPTIONS]


def build_grpc_server(plane: DataPlane, address: str,
                      reuse_port: bool = False) -> tuple[grpc.aio.Server, int]:
    """An unstarted ``grpc.aio`` server bound to ``address``, and its port.

    ``grpc.aio`` on the data plane's event loop, not the thread-pool server: measured
    side by side on an echo service the two cost the same per call, and a thread-pool
    handler would add a hop to the event loop (about 60 µs) to reach the batcher."""
    server = grpc.aio.server(options=server_options(plane.settings.max_request_bytes,
                                                    reuse_port))
    servicer, token = InferenceServicer(plane), plane.settings.auth_token
    handlers = {}
    for name, (request_cls, response_cls, streaming) in protos.METHODS.items():
        method = getattr(servicer, name)
        if streaming:
            handlers[name] = grpc.stream_stream_rpc_method_handler(
                _streaming(method, name, token), request_deserializer=request_cls.FromString,
                response_serializer=response_cls.SerializeToString)
        else:
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                _unary(method, name, token), request_deserializer=request_cls.FromString,
                response_serializer=response_cls.SerializeToString)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(protos.SERVICE_NAME, handlers),))
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"gRPC could not bind {address}")
    return server, port

