"""The gRPC front end: ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health``
served by grpcio's server (``grpc.aio`` on the C core) over the ``DataPlane``.

grpc-core owns the connections: HTTP/2 framing and flow control, its per-connection
budgets on resets, pings and header blocks, the message size limit (``--max-request-bytes``,
inflated size included), compression, keepalive and ``grpc-timeout``. This module is a
thin translator: each RPC takes its request as raw bytes and gives its answer as raw bytes,
so it decides where a message is parsed and serialised (on the event loop when small, no
thread hop; in a worker thread when large, so that health checks keep being answered).
``ServerError``s leave through one table from HTTP status to gRPC code::

    server = GrpcServer(plane, host="127.0.0.1", port=0)
    await server.start()            # server.port is the bound port
    ...
    await server.stop(grace_s=5)
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import types
from typing import Any, Callable, Optional

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from flowserve.protocol import protos  # the one copy of the wire protocol
from flowserve.protocol.protos import health
from ..dataplane import DataPlane
from ..datatypes import OFFLOAD_BYTES, DecodeLimits
from ..errors import ServerConfigError, ServerError, UnauthorizedError
from .codec import decode_infer_request, encode_infer_response, plain_parameters, split_raw_inputs
from .receive import PROBE_S, MessageReads, MessageStalled, MessageTimeout

log = logging.getLogger("flowserve.server")

Code = grpc.StatusCode
GRPC_CODES = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND,
    413: Code.RESOURCE_EXHAUSTED,
    503: Code.UNAVAILABLE,
    500: Code.INTERNAL,
}
OPEN_METHODS = ("ServerLive", "ServerReady", "Check", "Watch")  # probes carry no token
SERVER_SERVICES = ("", protos.SERVICE_NAME)  # health names of the server itself
WATCH_POLL_S = 1.0  # how often a health Watch looks at the server's state
MAX_DETAILS_CHARS = 384  # a status message longer than this keeps its two ends only
STREAM_IN_FLIGHT = 16  # requests of one ModelStreamInfer stream being run or written
STREAM_IN_FLIGHT_BYTES = 32 << 20  # ... and their request bytes (one message always fits)
MAX_CONCURRENT_STREAMS = 100  # calls open at once on one connection
MAX_FRAME_BYTES = 1 << 20  # largest HTTP/2 frame a client may send (DATA of a large message)
# --grpc-infer-response-compression-level as grpc-core's levels (as Triton sets them): the
# core picks an algorithm the client accepts (grpc-accept-encoding), else sends plain
COMPRESSION_LEVELS = types.MappingProxyType({"none": 0, "low": 1, "medium": 2, "high": 3})
# --grpc-compression as grpc-core's bitset of the encodings it inflates (bit 0 identity,
# 1 deflate, 2 gzip): a message in another is refused before it is read, UNIMPLEMENTED
# "Compression algorithm 'gzip' is disabled."; answers are compressed all the same
REQUEST_ENCODINGS = types.MappingProxyType({"identity": 0b001, "gzip": 0b111})


class CallError(Exception):
    """A call refused by the gRPC layer itself, with its status code."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


def shown(name: str, limit: int = 128) -> str:
    """``name`` quoted for a message, cut to ``limit`` characters (a client may send 1 MB)."""
    if len(name) <= limit:
        return repr(name)
    return repr(name[:limit]) + f"... ({len(name)} characters)"


def bounded(message: str) -> str:
    """A status message of at most about ``MAX_DETAILS_CHARS``: long ones keep both ends."""
    if len(message) <= MAX_DETAILS_CHARS:
        return message
    half = MAX_DETAILS_CHARS // 2
    return f"{message[:half]}... ({len(message) - 2 * half} characters cut) ...{message[-half:]}"


def _message(exc: BaseException) -> str:
    """What a client is told of ``exc``: a ``ServerError``'s message, else no internals."""
    if isinstance(exc, (ServerError, CallError)):
        return bounded(str(exc))
    log.error("unexpected error in a gRPC call", exc_info=exc)
    return "internal error"


def _code(exc: BaseException) -> grpc.StatusCode:
    if isinstance(exc, CallError):
        return exc.code
    status = exc.status if isinstance(exc, ServerError) else 500
    return GRPC_CODES.get(status, Code.INTERNAL)


def _parse(request_cls, raw: bytes, method: str):
    try:
        return request_cls.FromString(raw)
    except DecodeError:
        raise CallError(Code.INVALID_ARGUMENT, f"{method}: the request is not a valid "
                        f"{request_cls.DESCRIPTOR.full_name} message") from None


def _echo(request) -> Any:
    """A response naming the request a stream error belongs to (model, version, id)."""
    return protos.ModelInferResponse(model_name=request.model_name[:1024],
                                     model_version=request.model_version[:64],
                                     id=request.id[:1024])


class InferenceServicer:
    """One coroutine per RPC of ``GRPCInferenceService``; each takes a parsed request and
    returns a response message (``ModelInfer`` and ``ModelStreamInfer`` work on bytes)."""

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

    async def infer_bytes(self, raw: bytes, serialize=None) -> bytes:
        """One ``ModelInferRequest`` in, its answer out as bytes (``serialize(response)``;
        by default the ``ModelInferResponse``): parsed and serialised on the loop when
        small, in a worker thread when large."""
        serialize = serialize or _serialized
        if len(raw) > OFFLOAD_BYTES:
            request = await asyncio.to_thread(self._decode, raw)
        else:
            request = self._decode(raw)
        response = await self.plane.infer(request)
        if sum(array.nbytes for array in response.outputs.values()) > OFFLOAD_BYTES:
            return await asyncio.to_thread(serialize, response)
        return serialize(response)

    def _decode(self, raw: bytes):
        """The request in ``raw``, its ``raw_input_contents`` as views of ``raw`` (no copy)
        where the wire format allows, else as protobuf parses them."""
        split = split_raw_inputs(raw)
        if split is None:
            return decode_infer_request(_parse(protos.ModelInferRequest, raw, "ModelInfer"),
                                        self.limits)
        rest, blobs = split
        return decode_infer_request(_parse(protos.ModelInferRequest, rest, "ModelInfer"),
                                    self.limits, blobs)

    async def stream_answer(self, raw: bytes) -> bytes:
        """One message of a ``ModelStreamInfer`` stream answered: its outputs, or its error
        (the stream goes on)."""
        try:
            return await self.infer_bytes(raw, _serialized_stream_answer)
        except Exception as exc:
            try:
                echo = _echo(protos.ModelInferRequest.FromString(raw))
            except DecodeError:
                echo = None
            return protos.ModelStreamInferResponse(error_message=_message(exc),
                                                   infer_response=echo).SerializeToString()

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
        return protos.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(self, request):
        self.plane.shared_memory.cuda_unregister(request.name)
        return protos.CudaSharedMemoryUnregisterResponse()


def _serialized(response) -> bytes:
    return encode_infer_response(response).SerializeToString()


def _serialized_stream_answer(response) -> bytes:
    return protos.ModelStreamInferResponse(infer_response=encode_infer_response(response)).SerializeToString()


class HealthServicer:
    """gRPC's standard health service (``grpc.health.v1.Health``), for Kubernetes' gRPC
    probes, ``grpc-health-probe`` and load balancers. Service ``""`` (or
    ``inference.GRPCInferenceService``) is the server: SERVING when it is ready, as
    ``ServerReady`` says; a model's name is that model (its latest version); from the start
    of a shutdown everything is NOT_SERVING. ``Check`` answers NOT_FOUND for a name the
    server does not know. The server's own status is open to all; a model's status, and
    ``List`` (every model), are behind the token when one is set: they name the models.
    ``Watch`` sends the status at once and again whenever it changes (SERVICE_UNKNOWN for
    a name not known yet)."""

    def __init__(self, plane: DataPlane, closing: asyncio.Event,
                 authorize: Callable[[Any], None]):
        self.plane, self.closing, self.authorize = plane, closing, authorize
        self.watches = 0  # open Watch calls, which a shutdown lets say NOT_SERVING first

    def status(self, service: str) -> Optional[int]:
        """The ServingStatus of ``service``, or None when the server does not know it."""
        if service in SERVER_SERVICES:
            ready = self.plane.ready()
        elif self.plane.knows_model(service):
            ready = self.plane.model_ready(service)
        else:
            return None
        serving = ready and not self.closing.is_set()
        return health.HealthCheckResponse.SERVING if serving else health.HealthCheckResponse.NOT_SERVING

    async def Check(self, request, context):
        if request.service not in SERVER_SERVICES:
            self.authorize(context)
        status = self.status(request.service)
        if status is None:
            raise CallError(Code.NOT_FOUND, f"health: unknown service {shown(request.service)}")
        return health.HealthCheckResponse(status=status)

    async def List(self, request, context):
        """Every service ``Check`` knows: the server (under ``""``) and each model."""
        names = [*SERVER_SERVICES, *self.plane.model_names()]
        return health.HealthListResponse(statuses={
            name: health.HealthCheckResponse(status=self.status(name)) for name in names})

    async def Watch(self, request, context):
        if request.service not in SERVER_SERVICES:
            self.authorize(context)
        self.watches += 1
        try:
            async for status in self._changes(request.service):
                yield health.HealthCheckResponse(status=status)
        finally:
            self.watches -= 1

    async def _changes(self, service: str):
        """``service``'s status at once, then each change, until a shutdown: NOT_SERVING,
        then the end. Whether the server is closing is read before the status, never after
        a yield: a shutdown that starts while a message is being written (the generator
        suspended at its yield) is seen on the next round, which sends NOT_SERVING."""
        last = None
        while True:
            closing = self.closing.is_set()
            status = health.HealthCheckResponse.NOT_SERVING if closing else self.status(service)
            if status is None:
                status = health.HealthCheckResponse.SERVICE_UNKNOWN
            if status != last:
                yield status
                last = status
            if closing:
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.closing.wait(), WATCH_POLL_S)


class _StreamBudget:
    """What one ``ModelStreamInfer`` stream may have in flight: at most ``count`` requests
    and about ``nbytes`` of them (one more message is read only when there is room)."""

    def __init__(self, count: int = STREAM_IN_FLIGHT, nbytes: int = STREAM_IN_FLIGHT_BYTES):
        self.max_count, self.max_bytes = count, nbytes
        self.count = self.bytes = 0
        self._freed = asyncio.Event()

    async def room(self) -> None:
        while self.count >= self.max_count or (self.count and self.bytes >= self.max_bytes):
            self._freed.clear()
            await self._freed.wait()

    def take(self, size: int) -> None:
        self.count, self.bytes = self.count + 1, self.bytes + size

    def give(self, size: int) -> None:
        self.count, self.bytes = self.count - 1, self.bytes - size
        self._freed.set()


class GrpcHandlers(grpc.GenericRpcHandler):
    """Every method of both services as a grpcio handler on raw bytes, with the token
    checked before a protected method runs (grpc answers UNIMPLEMENTED for the rest)."""

    def __init__(self, plane: DataPlane, closing: asyncio.Event):
        self.token = plane.settings.auth_token
        settings = plane.settings
        self.message_timeout_s = settings.grpc_message_timeout_s
        self.stall_s = settings.grpc_receive_stall_timeout_s
        self.reads = MessageReads(self.message_timeout_s, receive_slots(settings), self.stall_s)
        self.servicer = InferenceServicer(plane)
        self.checker = checker = HealthServicer(plane, closing, self.authorize)
        self.handlers: dict[str, tuple[str, Any, Any]] = {}
        for name, (request_cls, _, _) in protos.METHODS.items():
            if name == "ModelInfer":
                run = grpc.stream_unary_rpc_method_handler(self._model_infer)
            elif name == "ModelStreamInfer":
                run = grpc.stream_stream_rpc_method_handler(self._model_stream_infer)
            else:
                run = grpc.stream_unary_rpc_method_handler(self._unary(
                    name, request_cls, lambda request, _, call=getattr(self.servicer, name): call(request)))
            self._add(protos.SERVICE_NAME, name, run)
        for name, _, _, streaming in health.METHODS:
            request_cls, call = health.REQUESTS[name], getattr(checker, name)
            if streaming:
                run = grpc.stream_stream_rpc_method_handler(self._server_stream(name, request_cls, call))
            else:
                run = grpc.stream_unary_rpc_method_handler(self._unary(name, request_cls, call))
            self._add(health.SERVICE_NAME, name, run)

    def _add(self, service: str, name: str, run) -> None:
        refuse = (grpc.stream_stream_rpc_method_handler(_refused) if run.response_streaming
                  else grpc.stream_unary_rpc_method_handler(_refused))
        self.handlers[f"/{service}/{name}"] = (name, run, refuse)

    def service(self, handler_call_details):
        entry = self.handlers.get(handler_call_details.method)
        if entry is None:
            return None
        name, run, refuse = entry
        if self.token is None or name in OPEN_METHODS:
            return run
        return run if self._authorized(handler_call_details.invocation_metadata) else refuse

    def _authorized(self, metadata) -> bool:
        expected = f"Bearer {self.token}".encode()
        for key, value in metadata or ():
            if key == "authorization":
                given = value if isinstance(value, bytes) else value.encode()
                return hmac.compare_digest(given, expected)
        return False

    def authorize(self, context) -> None:
        """Refuse a call of an open method that asks for what the token protects."""
        if self.token is not None and not self._authorized(context.invocation_metadata()):
            raise UnauthorizedError("authorization: missing or wrong bearer token")

    async def _request(self, context) -> bytes:
        """A unary call's one request message, which must be whole within
        ``--grpc-message-timeout`` (grpc-core would hold a half-sent one for ever), read
        when there is room for it (``receive.MessageReads``)."""
        try:
            raw = await self.reads.read(context)
        except MessageTimeout:
            raise CallError(Code.DEADLINE_EXCEEDED, "the request message did not arrive within "
                            f"{self.message_timeout_s:g} s (--grpc-message-timeout)") from None
        except MessageStalled:
            raise CallError(Code.RESOURCE_EXHAUSTED, "the request message was still arriving "
                            "while other calls waited for room to receive theirs (a room is held "
                            f"{self.stall_s:g} s at most then, --grpc-receive-stall-timeout; the "
                            f"spare one {PROBE_S * 1000:g} ms; --grpc-receive-buffer-bytes)") from None
        if raw is grpc.aio.EOF:
            raise CallError(Code.INTERNAL, "a unary call must send one message; none came")
        return raw

    async def _model_infer(self, requests, context) -> bytes:
        try:
            return await self.servicer.infer_bytes(await self._request(context))
        except Exception as exc:  # ServerErrors with their code; anything else INTERNAL
            await context.abort(_code(exc), _message(exc))

    def _unary(self, name: str, request_cls, run):
        """A unary handler: read, parse, ``run(request, context)``, serialise; errors as
        statuses."""
        async def handle(requests, context) -> bytes:
            try:
                request = _parse(request_cls, await self._request(context), name)
                return (await run(request, context)).SerializeToString()
            except Exception as exc:
                await context.abort(_code(exc), _message(exc))
        return handle

    def _server_stream(self, name: str, request_cls, run):
        async def handle(requests, context):
            try:
                request = _parse(request_cls, await self._request(context), name)
                async for response in run(request, context):
                    yield response.SerializeToString()
            except Exception as exc:
                await context.abort(_code(exc), _message(exc))
        return handle

    async def _model_stream_infer(self, requests, context) -> None:
        """Answers in the order of the requests, up to ``STREAM_IN_FLIGHT`` run at once: the
        next message is read only when there is room (grpc's flow control then holds the
        client back), and each answer waits for the client's window before the next, for
        ``--grpc-message-timeout`` at most (then the stream ends, DEADLINE_EXCEEDED)."""
        budget, answers = _StreamBudget(), asyncio.Queue()
        reader = asyncio.ensure_future(self._read_stream(requests, budget, answers))
        try:
            while (entry := await answers.get()) is not None:
                task, size = entry
                answer = await task
                try:
                    async with asyncio.timeout(self.message_timeout_s):
                        await context.write(answer)
                except TimeoutError:
                    await context.abort(Code.DEADLINE_EXCEEDED, "an answer waited for the client's "
                                        f"window over {self.message_timeout_s:g} s (--grpc-message-timeout)")
                budget.give(size)
            await reader  # a failure to read (the client's or grpc's) ends the call
        finally:
            reader.cancel()
            while not answers.empty():
                entry = answers.get_nowait()
                if entry is not None:
                    entry[0].cancel()

    async def _read_stream(self, requests, budget: _StreamBudget, answers: asyncio.Queue):
        try:
            await budget.room()
            async for raw in requests:
                budget.take(len(raw))
                answers.put_nowait((asyncio.ensure_future(self.servicer.stream_answer(raw)),
                                    len(raw)))
                await budget.room()
        finally:
            answers.put_nowait(None)


async def _refused(request, context):
    await context.abort(Code.UNAUTHENTICATED, "authorization: missing or wrong bearer token")


def receive_slots(settings) -> int:
    """How many request messages may be received at once: ``--grpc-receive-buffer-bytes``
    over ``--max-request-bytes`` (what each may pin), one at least."""
    return max(1, settings.grpc_receive_buffer_bytes // settings.max_request_bytes)


def server_options(settings, reuse_port: bool) -> list[tuple[str, Any]]:
    """grpc-core's channel arguments for the server: Triton's keepalive policy and limits,
    the message size from ``--max-request-bytes``, the handshake from
    ``--header-timeout-s`` and the request encodings from ``--grpc-compression``."""
    return [
        ("grpc.compression_enabled_algorithms_bitset",
         REQUEST_ENCODINGS[settings.grpc_compression]),
        ("grpc.default_compression_level",
         COMPRESSION_LEVELS[settings.grpc_infer_response_compression_level]),
        ("grpc.max_receive_message_length", settings.max_request_bytes),  # inflated too
        # a stream takes --grpc-receive-window-bytes before its message is asked for
        # (receive.MessageReads), not the max(4 MiB, 2 x BDP) that grpc-core's bandwidth
        # probing offers; once asked for, a message's window opens to its announced length.
        # grpc-core makes the connection's window this size too (plus those openings), so it
        # is a trade: 100 half-sent calls on one connection added 245 MB at 64 KiB, 311 at
        # 1 MiB, 535 at 4 MiB; eight 588 KiB images at once ran ~25% faster at 4 MiB
        ("grpc.http2.lookahead_bytes", settings.grpc_receive_window_bytes),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.max_frame_size", MAX_FRAME_BYTES),  # as offered with the probing on
        ("grpc.max_send_message_length", -1),
        ("grpc.max_metadata_size", settings.max_header_bytes),
        ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
        ("grpc.server_handshake_timeout_ms", int(settings.header_timeout_s * 1000)),
        ("grpc.keepalive_time_ms", 7_200_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 2),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 300_000),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.so_reuseport", int(reuse_port)),
    ]


class GrpcServer:
    """The gRPC front end on ``host:port`` (0: a free port, ``port`` once started), over
    TLS with ``credentials``: ``start``, then ``stop`` drains it."""

    def __init__(self, plane: DataPlane, host: str, port: int, reuse_port: bool = False,
                 credentials: Optional[grpc.ServerCredentials] = None):
        self.plane, self.credentials, self.reuse_port = plane, credentials, reuse_port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.closing = asyncio.Event()  # set when the server starts to shut down
        self.port: Optional[int] = None
        self.handlers: Optional[GrpcHandlers] = None
        self._server = None

    async def start(self) -> None:
        server = grpc.aio.server(options=server_options(self.plane.settings, self.reuse_port))
        self.handlers = GrpcHandlers(self.plane, self.closing)
        server.add_generic_rpc_handlers((self.handlers,))
        try:
            if self.credentials is None:
                self.port = server.add_insecure_port(self.address)
            else:
                self.port = server.add_secure_port(self.address, self.credentials)
        except RuntimeError as exc:
            raise ServerConfigError(f"gRPC: cannot listen on {self.address}: {exc}") from None
        await server.start()
        self._server = server

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls (GOAWAY), let open ones finish for ``grace_s``, then cancel
        them; health watches are told NOT_SERVING and end."""
        self.closing.set()
        if self._server is None:
            return
        deadline = asyncio.get_running_loop().time() + grace_s  # a watch ends in ms unless the machine is loaded
        while self.handlers.checker.watches and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # each watch sends NOT_SERVING and ends before GOAWAY
        await self._server.stop(grace_s)
        self.handlers.reads.stop()
