"""The gRPC front end: ``inference.GRPCInferenceService`` over the ``DataPlane``.

flowserve speaks gRPC itself, on HTTP/2 connections of its own (``http2``) on the data
plane's event loop: a unary call is decoded, run and answered with no thread hop and
in one write. Each RPC translates its message, calls the data plane and translates
back; ``ServerError``s leave through one table from HTTP status to gRPC code::

    server = GrpcServer(plane, bound_socket)
    await server.start()
    ...
    await server.stop(grace_s=5)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import math
import socket
import ssl
from typing import Any, Callable, Optional

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from flowserve.clients import protos  # the one copy of the wire protocol
from flowserve.clients.protos import health
from .compression import DEFLATE_INLINE_BYTES, DEFLATE_MIN_BYTES, LEVELS, preferred_encoding
from .dataplane import DataPlane
from .datatypes import OFFLOAD_BYTES, DecodeLimits
from .errors import ServerError, UnauthorizedError
from .grpc_codec import decode_infer_request, encode_infer_response, plain_parameters
from .grpc_wire import (
    ENCODED_RESPONSE_HEADERS,
    OK_TRAILERS,
    RESPONSE_HEADERS,
    Status,
    WireError,
    check_announced_size,
    check_encoding,
    error_trailers,
    frame_message,
    http_refusal,
    next_message,
    timeout_seconds,
    trailers_only,
)
from .http2 import Http2Connection, Http2Limits, Stream

log = logging.getLogger("flowserve.server")

GRPC_CODES = {
    400: Status.INVALID_ARGUMENT,
    401: Status.UNAUTHENTICATED,
    403: Status.PERMISSION_DENIED,
    404: Status.NOT_FOUND,
    413: Status.RESOURCE_EXHAUSTED,
    503: Status.UNAVAILABLE,
    500: Status.INTERNAL,
}
OPEN_METHODS = ("ServerLive", "ServerReady", "Check", "Watch")  # probes carry no token
COMPRESSED_METHODS = ("ModelInfer", "ModelStreamInfer")  # --grpc-infer-response-compression-level
WATCH_POLL_S = 1.0  # how often a health Watch looks at the server's state


class InferenceServicer:
    """One coroutine per RPC of ``GRPCInferenceService``."""

    def __init__(self, plane: DataPlane):
        self.plane = plane
        self.limits = DecodeLimits(plane.settings.max_bytes_elements,
                                   plane.settings.max_json_elements)

    async def ServerLive(self, request):
        return protos.ServerLiveResponse(live=self.plane.live())

    async def ServerReady(self, request):
        return protos.ServerReadyResponse(ready=self.plane.ready())

    async def ModelReady(self, request):
        return protos.ModelReadyResponse(ready=self.plane.model_ready(request.name,
                                                                      request.version))

    async def ServerMetadata(self, request):
        return protos.ServerMetadataResponse(**self.plane.server_metadata())

    async def ModelMetadata(self, request):
        metadata = self.plane.model_metadata(request.name, request.version)
        metadata.pop("parameters", None)  # not in KServe's ModelMetadataResponse; ModelConfig has them
        return json_format.ParseDict(metadata, protos.ModelMetadataResponse())

    async def ModelInfer(self, request):
        response = await self.plane.infer(await self._decode(request))
        return encode_infer_response(response)

    async def _decode(self, request):
        """Decode on the loop, or in a worker thread for a large message (BYTES elements
        are parsed one by one), so health checks keep being answered. Large is judged by
        the elements the inputs declare (4 bytes each): ``ByteSize()`` would serialize the
        message to find out, 30 µs for a 588 KiB image."""
        if 4 * sum(math.prod(tensor.shape) for tensor in request.inputs) > OFFLOAD_BYTES:
            return await asyncio.to_thread(decode_infer_request, request, self.limits)
        return decode_infer_request(request, self.limits)

    async def ModelStreamInfer(self, request_iterator):
        """Each message gets its own response: its outputs, or its error (the stream goes on)."""
        async for request in request_iterator:
            try:
                response = await self.plane.infer(await self._decode(request))
                yield protos.ModelStreamInferResponse(
                    infer_response=encode_infer_response(response))
            except Exception as exc:
                yield protos.ModelStreamInferResponse(error_message=_message(exc),
                                                      infer_response=_echo(request))

    async def ModelConfig(self, request):
        config = self.plane.model_config(request.name, request.version)
        message = protos.ModelConfigResponse()
        json_format.ParseDict(config, message.config, ignore_unknown_fields=True)
        return message

    async def ModelStatistics(self, request):
        stats = self.plane.statistics(request.name, request.version)
        return json_format.ParseDict(stats, protos.ModelStatisticsResponse())

    async def RepositoryIndex(self, request):
        rows = self.plane.repository_index(request.ready)
        return json_format.ParseDict({"models": rows}, protos.RepositoryIndexResponse())

    async def RepositoryModelLoad(self, request):
        await self.plane.load_model(request.model_name, plain_parameters(request.parameters))
        return protos.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request):
        await self.plane.unload_model(request.model_name, plain_parameters(request.parameters))
        return protos.RepositoryModelUnloadResponse()

    async def SystemSharedMemoryStatus(self, request):
        regions = self.plane.shared_memory.status(request.name)
        return json_format.ParseDict({"regions": {r["name"]: r for r in regions}},
                                     protos.SystemSharedMemoryStatusResponse())

    async def SystemSharedMemoryRegister(self, request):
        self.plane.shared_memory.register(request.name, request.key, request.offset,
                                          request.byte_size)
        return protos.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request):
        self.plane.shared_memory.unregister(request.name)
        return protos.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request):
        self.plane.shared_memory.cuda_status(request.name)
        return protos.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(self, request):
        self.plane.shared_memory.cuda_register(request.name)

    async def CudaSharedMemoryUnregister(self, request):
        self.plane.shared_memory.cuda_unregister(request.name)
        return protos.CudaSharedMemoryUnregisterResponse()


class HealthServicer:
    """gRPC's standard health service (``grpc.health.v1.Health``), for Kubernetes' gRPC
    probes, ``grpc-health-probe`` and load balancers. Service ``""`` (or
    ``inference.GRPCInferenceService``) is the server: SERVING when it is ready, as
    ``ServerReady`` says; a model's name is that model (its latest version); from the start
    of a shutdown everything is NOT_SERVING. ``Check`` answers NOT_FOUND for a name the
    server does not know; ``List`` gives the server's and every model's status (behind the
    token, when one is set: it names the models); ``Watch`` sends the status at once and
    again whenever it changes (SERVICE_UNKNOWN for a name not known yet)."""

    def __init__(self, plane: DataPlane, closing: asyncio.Event):
        self.plane, self.closing = plane, closing

    def status(self, service: str) -> Optional[int]:
        """The ServingStatus of ``service``, or None when the server does not know it."""
        if service in ("", protos.SERVICE_NAME):
            ready = self.plane.ready()
        elif self.plane.knows_model(service):
            ready = self.plane.model_ready(service)
        else:
            return None
        serving = ready and not self.closing.is_set()
        return health.HealthCheckResponse.SERVING if serving else health.HealthCheckResponse.NOT_SERVING

    async def Check(self, request):
        status = self.status(request.service)
        if status is None:
            raise WireError(Status.NOT_FOUND, f"health: unknown service {request.service!r}")
        return health.HealthCheckResponse(status=status)

    async def List(self, request):
        """Every service ``Check`` knows: the server (under ``""``) and each model."""
        names = ["", protos.SERVICE_NAME, *self.plane.model_names()]
        return health.HealthListResponse(statuses={
            name: health.HealthCheckResponse(status=self.status(name)) for name in names})

    async def Watch(self, requests):
        async for request in requests:
            break
        else:
            raise WireError(Status.INVALID_ARGUMENT, "Watch: expected one HealthCheckRequest")
        last = None
        while True:
            status = self.status(request.service)
            if status is None:
                status = health.HealthCheckResponse.SERVICE_UNKNOWN
            if status != last:
                yield health.HealthCheckResponse(status=status)
                last = status
            if self.closing.is_set():
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.closing.wait(), WATCH_POLL_S)


def _headers(call: Call) -> bytes:
    """The response headers of ``call``: with its grpc-encoding when it compresses."""
    return ENCODED_RESPONSE_HEADERS[call.answer_encoding] if call.answer_encoding else RESPONSE_HEADERS


def _message(exc: Exception) -> str:
    """What a client is told of ``exc``: a ``ServerError``'s message, else no internals."""
    if isinstance(exc, (ServerError, WireError)):
        return str(exc)
    log.error("unexpected error in a gRPC call", exc_info=exc)
    return "internal error"


def _code(exc: Exception) -> Status:
    if isinstance(exc, WireError):
        return exc.status
    status = exc.status if isinstance(exc, ServerError) else 500
    return GRPC_CODES.get(status, Status.INTERNAL)


def _echo(request):
    """A response naming the request a stream error belongs to (model, version, id)."""
    return protos.ModelInferResponse(model_name=request.model_name,
                                     model_version=request.model_version, id=request.id)


@dataclasses.dataclass(frozen=True)
class Method:
    """One RPC: its coroutine (or async generator), its message classes."""

    name: str
    run: Callable[..., Any]
    request_cls: Any
    streaming: bool


@dataclasses.dataclass
class Call:
    """A stream's gRPC state: its method, encoding, task, deadline and request queue."""

    method: Method
    encoding: Optional[str]
    timeout_s: Optional[float]
    task: Optional[asyncio.Task] = None
    timer: Optional[asyncio.TimerHandle] = None
    expired: bool = False
    requests: Optional[asyncio.Queue] = None
    answer_encoding: Optional[str] = None  # how its answers are compressed (None: not)


class GrpcApplication:
    """The HTTP/2 application that turns streams into calls of the servicer."""

    def __init__(self, plane: DataPlane):
        self.max_bytes = plane.settings.max_request_bytes
        self.token = plane.settings.auth_token
        self.closing = asyncio.Event()  # set when the server starts to shut down
        self.answer_level = LEVELS[plane.settings.grpc_infer_response_compression_level]
        servicer, checker = InferenceServicer(plane), HealthServicer(plane, self.closing)
        self.methods = {
            f"/{protos.SERVICE_NAME}/{name}": Method(name, getattr(servicer, name), request_cls,
                                                     streaming)
            for name, (request_cls, _, streaming) in protos.METHODS.items()}
        for name, _, _, streaming in health.METHODS:
            self.methods[f"/{health.SERVICE_NAME}/{name}"] = Method(
                name, getattr(checker, name), health.REQUESTS[name], streaming)

    def request_started(self, stream: Stream) -> None:
        headers = stream.headers
        if headers.get(":method") != "POST":
            return stream.send_trailers(http_refusal(405, "gRPC calls are POST requests"))
        if not headers.get("content-type", "").startswith("application/grpc"):
            return stream.send_trailers(http_refusal(
                415, "content-type: expected application/grpc"))
        try:
            method = self.methods.get(headers.get(":path"))
            if method is None:
                raise WireError(Status.UNIMPLEMENTED,
                                f"method {headers.get(':path')!r}: not a method of "
                                f"{protos.SERVICE_NAME} or {health.SERVICE_NAME}")
            self._authorize(headers, method.name)
            call = Call(method, check_encoding(headers), timeout_seconds(headers))
            if self.answer_level and method.name in COMPRESSED_METHODS:
                call.answer_encoding = preferred_encoding(headers.get("grpc-accept-encoding"))
        except Exception as exc:
            return stream.send_trailers(trailers_only(_code(exc), _message(exc)))
        stream.state = call
        if method.streaming:
            call.requests = asyncio.Queue()
            self._start(stream, call, self._stream_call(stream, call))

    def body_received(self, stream: Stream) -> None:
        call: Call = stream.state
        try:
            if call.method.streaming:
                return self._queue_requests(stream, call)
            check_announced_size(stream.body, self.max_bytes)
            if not stream.ended:  # the message may be whole before the stream ends
                return
            message = next_message(stream.body, self.max_bytes, call.encoding)
            if message is None or stream.body:
                raise WireError(Status.INTERNAL, "a unary call must send exactly one "
                                "whole message")
        except WireError as exc:
            return stream.send_trailers(trailers_only(exc.status, str(exc)))
        self._start(stream, call, self._unary_call(stream, call, message))

    def _queue_requests(self, stream: Stream, call: Call) -> None:
        while True:
            message = next_message(stream.body, self.max_bytes, call.encoding)
            if message is None:
                break
            call.requests.put_nowait(message)
        if stream.ended:
            call.requests.put_nowait(None if not stream.body else WireError(
                Status.INTERNAL, "the stream ended inside a message"))

    def request_reset(self, stream: Stream) -> None:
        call: Optional[Call] = stream.state
        if call is not None and call.task is not None:
            call.task.cancel()
        else:
            stream.reset()

    def _start(self, stream: Stream, call: Call, coroutine) -> None:
        call.task = asyncio.get_running_loop().create_task(coroutine)
        # a done callback, not a ``finally``: a task cancelled before its first step never
        # runs its coroutine, and its stream must still be let go
        call.task.add_done_callback(lambda _: self._finish(stream, call))
        if call.timeout_s is not None:
            call.timer = asyncio.get_running_loop().call_later(
                call.timeout_s, self._expire, call)

    @staticmethod
    def _expire(call: Call) -> None:
        call.expired = True
        call.task.cancel()

    async def _unary_call(self, stream: Stream, call: Call, message: bytes) -> None:
        try:
            request = _parse(call.method, message)
            response = await call.method.run(request)
            stream.respond(_headers(call), await self._framed(call, response), OK_TRAILERS)
        except asyncio.CancelledError:
            self._cancelled(stream, call, headers_sent=False)
        except Exception as exc:  # ServerErrors with their code; anything else INTERNAL
            stream.send_trailers(trailers_only(_code(exc), _message(exc)))

    async def _stream_call(self, stream: Stream, call: Call) -> None:
        headers_sent = False
        try:
            async for response in call.method.run(self._requests(call)):
                if not headers_sent:
                    stream.send_headers(_headers(call))
                    headers_sent = True
                stream.send_data(await self._framed(call, response))
            stream.send_trailers(OK_TRAILERS if headers_sent else RESPONSE_HEADERS + OK_TRAILERS)
        except asyncio.CancelledError:
            self._cancelled(stream, call, headers_sent)
        except Exception as exc:
            stream.send_trailers(error_trailers(_code(exc), _message(exc)) if headers_sent
                                 else trailers_only(_code(exc), _message(exc)))

    async def _framed(self, call: Call, response) -> bytes:
        """``response`` as a message, compressed as ``call`` agreed when it is worth it."""
        payload = response.SerializeToString()
        if call.answer_encoding is None or len(payload) < DEFLATE_MIN_BYTES:
            return frame_message(payload)
        if len(payload) > DEFLATE_INLINE_BYTES:
            return await asyncio.to_thread(frame_message, payload, call.answer_encoding, self.answer_level)
        return frame_message(payload, call.answer_encoding, self.answer_level)

    async def _requests(self, call: Call):
        while True:
            message = await call.requests.get()
            if message is None:
                return
            if isinstance(message, WireError):
                raise message
            yield _parse(call.method, message)

    @staticmethod
    def _cancelled(stream: Stream, call: Call, headers_sent: bool) -> None:
        if call.expired and not stream.was_reset:
            message = "deadline exceeded"
            stream.send_trailers(error_trailers(Status.DEADLINE_EXCEEDED, message)
                                 if headers_sent else
                                 trailers_only(Status.DEADLINE_EXCEEDED, message))
        else:
            stream.reset()

    @staticmethod
    def _finish(stream: Stream, call: Call) -> None:
        if call.timer is not None:
            call.timer.cancel()
        if not stream.closed:
            stream.reset()

    def _authorize(self, headers: dict, name: str) -> None:
        if self.token is None or name in OPEN_METHODS:
            return
        given = headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, f"Bearer {self.token}".encode()):
            raise UnauthorizedError("authorization: missing or wrong bearer token")


def _parse(method: Method, message: bytes):
    try:
        return method.request_cls.FromString(message)
    except DecodeError:
        raise WireError(Status.INVALID_ARGUMENT, f"{method.name}: the request is not a "
                        f"valid {method.request_cls.DESCRIPTOR.full_name} message") from None


class GrpcServer:
    """The gRPC front end on a bound socket (over TLS with a ``tls`` context, whose ALPN
    offers ``h2``): ``start``, then ``stop`` drains it."""

    def __init__(self, plane: DataPlane, sock: socket.socket, tls: Optional[ssl.SSLContext] = None):
        settings = plane.settings
        self.tls, self.handshake_timeout_s = tls, settings.header_timeout_s
        self.limits = Http2Limits(max_header_list_bytes=settings.max_header_bytes,
                                  preface_timeout_s=settings.header_timeout_s)
        self.application = GrpcApplication(plane)
        self.connections: set[Http2Connection] = set()
        self._socket, self._server = sock, None

    @property
    def port(self) -> int:
        return self._socket.getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: Http2Connection(self.application, self.limits, self.connections),
            sock=self._socket, ssl=self.tls,
            ssl_handshake_timeout=self.handshake_timeout_s if self.tls else None)

    async def stop(self, grace_s: float) -> None:
        """Stop accepting, send GOAWAY, let open calls finish for ``grace_s``, then close
        (health watches are told NOT_SERVING and end)."""
        self.application.closing.set()
        self._server.close()
        for connection in list(self.connections):
            connection.go_away()
        deadline = asyncio.get_running_loop().time() + grace_s
        while self.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.abort()
        await asyncio.sleep(0)  # let the aborted connections report their loss
