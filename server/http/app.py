"""The HTTP front end: Open Inference Protocol REST routes over the ``DataPlane``.

Handlers only translate: read the body, decode with ``codec``, call the
data plane, encode. ``ServerError``s become ``{"error": msg}`` (``error_body``)
with their status; auth, the body-size limit and the one infer path are the
outer ASGI app, ``FrontDoor``::

    app = build_http_app(plane)      # a FastAPI app; serve it with uvicorn
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from typing import Optional

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..compression import (
    DEFLATE_INLINE_BYTES,
    DEFLATE_MIN_BYTES,
    ENCODINGS,
    LEVELS,
    InflateError,
    InflateLimitError,
    deflate,
    inflate,
    preferred_encoding,
)
from ..dataplane import DataPlane, server_version
from ..datatypes import OFFLOAD_BYTES
from ..errors import (
    InvalidRequestError,
    ModelNotReadyError,
    RequestTooLargeError,
    ServerError,
    UnauthorizedError,
    UnsupportedEncodingError,
)
from . import schemas
from .codec import (
    HEADER_LENGTH,
    DecodeLimits,
    PlanCache,
    decode_infer_request,
    encode_infer_response,
    parse_json,
)

_HEADER_LENGTH_KEY = HEADER_LENGTH.encode()

log = logging.getLogger("flowserve.server")

JSON = "application/json"
OPEN_PATHS = ("/v2/health/live", "/v2/health/ready")
VERSIONED = ("", "/versions/{model_version}")


def _json(body, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")).encode(), status, media_type=JSON)


def error_body(message: str) -> bytes:
    """The one error body of the HTTP front end: ``{"error": message}``."""
    return json.dumps({"error": message}, separators=(",", ":")).encode()


def _error(message: str, status: int) -> Response:
    return Response(error_body(message), status, media_type=JSON)


INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
_JSON_HEADERS = [(b"content-type", JSON.encode())]
_BINARY_HEADERS = [(b"content-type", b"application/octet-stream")]


SINK_MIN_BYTES = 64 * 1024  # uvicorn's flow-control high-water mark: smaller bodies come whole
_ALIGN = 64
_LENGTH_DIGITS = 19


class BodyBudget:
    """The bytes of ``BodySink`` buffers allocated ahead of their data, across the
    connections of one server, and the most there may be (``--max-preallocated-body-bytes``);
    a body beyond it grows as its data arrives instead. Used on the event loop only."""

    def __init__(self, limit: int):
        self.limit, self.reserved = limit, 0

    def reserve(self, size: int) -> bool:
        if self.reserved + size > self.limit:
            return False
        self.reserved += size
        return True

    def release(self, size: int) -> None:
        self.reserved -= size


class BodySink:
    """One large binary infer body, received straight into a buffer allocated once.

    uvicorn gathers a body in a bytearray, pausing the socket and waking the request's
    task every 64 KiB, and copies it at each hand-over; with the join of the pieces and the
    tensor's own copy, a body was copied four times after the parser. Here each chunk the
    parser yields is copied once, into a buffer of the declared ``Content-Length``, placed
    so that the binary part after the ``header_length``-byte JSON header starts at a
    64-byte boundary: the tensors decode as views of it, without another copy. The buffer
    counts in ``budget`` until ``filled()`` (the body complete, or never to be)."""

    __slots__ = ("_view", "_written", "_budget", "_reserved")

    def __init__(self, size: int, header_length: int, budget: Optional[BodyBudget] = None):
        buffer = np.empty(size + _ALIGN, np.uint8)  # not zeroed: every byte is written
        start = -(buffer.ctypes.data + header_length) % _ALIGN
        self._view, self._written = memoryview(buffer)[start:start + size], 0
        self._budget, self._reserved = budget, size if budget is not None else 0

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``; the HTTP parser never yields more than ``Content-Length``."""
        end = self._written + len(chunk)
        self._view[self._written:end] = chunk
        self._written = end

    def body(self) -> memoryview:
        """The bytes written so far (all of them once the message is complete)."""
        return self._view[:self._written]

    def filled(self) -> None:
        """No more bytes will come: the buffer no longer counts in the budget (once)."""
        if self._reserved:
            self._budget.release(self._reserved)
            self._reserved = 0


def _header(headers: list, name: bytes) -> Optional[bytes]:
    for key, value in headers:
        if key == name:
            return value
    return None


def _small_count(value: Optional[bytes]) -> Optional[int]:
    return int(value) if value and len(value) <= _LENGTH_DIGITS and value.isdigit() else None


async def _send_body(send, status: int, headers: list, body: bytes) -> None:
    """One complete response as two ASGI messages (no Response object per request)."""
    await send({"type": "http.response.start", "status": status,
                "headers": headers + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class FrontDoor:
    """Outermost ASGI app: auth, the body-size limit, and the one infer path.

    ``POST .../infer`` is served here (FastAPI's per-request routing and dependency
    machinery would cost more than a small model's inference; the route is documented in
    ``/openapi.json`` all the same); every other request goes on to FastAPI. flowserve's
    HTTP protocol (``server.app``) calls ``answer_infer`` itself, without ASGI messages.
    The parsed forms of repeated binary headers (``PlanCache``) live here, one cache per app.
    """

    def __init__(self, app, plane: DataPlane):
        self.app, self.plane = app, plane
        settings = plane.settings
        self.max_bytes = settings.max_request_bytes
        self.expected = f"Bearer {settings.auth_token}".encode() if settings.auth_token else None
        self.plans = PlanCache()
        self.body_budget = BodyBudget(settings.max_preallocated_body_bytes)
        self.limits = DecodeLimits(settings.max_bytes_elements, settings.max_json_elements)
        self.answer_level = LEVELS[settings.http_infer_response_compression_level]

    @staticmethod
    def infer_route(scope) -> Optional[re.Match]:
        """The route of a ``POST .../infer`` request (model, version), else None."""
        return INFER_PATH.match(scope["path"]) if scope["method"] == "POST" else None

    def body_sink(self, scope) -> Optional[BodySink]:
        """A ``BodySink`` for a request whose head was just parsed, when it is an infer
        that may go on (authorized, within ``--max-request-bytes``) with a binary body of
        ``SINK_MIN_BYTES`` or more, not compressed, within ``body_budget``; else None
        (uvicorn gathers the body as it arrives)."""
        headers = scope["headers"]
        size = _small_count(_header(headers, b"content-length"))
        if size is None or not SINK_MIN_BYTES <= size <= self.max_bytes:
            return None
        head = _small_count((_header(headers, _HEADER_LENGTH_KEY) or b"").strip())
        if head is None or head > size or _header(headers, b"content-encoding") is not None \
                or self.infer_route(scope) is None:
            return None
        try:
            self._guard(scope["path"], dict(headers))
        except ServerError:  # answered by answer_infer, the body unread
            return None
        if not self.body_budget.reserve(size):
            return None
        try:
            return BodySink(size, head, self.body_budget)
        except MemoryError:  # as if over the budget: nothing else was made
            self.body_budget.release(size)
            log.warning("body: %d bytes could not be allocated ahead of the data; receiving "
                        "it as it arrives", size)
            return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        match = self.infer_route(scope)
        if match is not None:
            return await _send_body(send, *await self.answer_infer(scope, receive, match))
        path, started = scope["path"], False

        async def tracked_send(message):
            nonlocal started
            started = True
            await send(message)

        try:
            self._guard(path, dict(scope["headers"]))
            return await self.app(scope, self._limited(receive), tracked_send)
        except ServerError as exc:
            status, payload = exc.status, error_body(str(exc))
        except Exception:
            log.exception("unexpected error on %s", path)
            status, payload = 500, error_body("internal error")
        if not started:  # an app that already answered keeps its answer
            await _send_body(send, status, _JSON_HEADERS, payload)

    async def answer_infer(self, scope, receive, route: re.Match) -> tuple[int, list, bytes]:
        """``(status, headers, body)`` answering one ``POST .../infer`` whose body
        ``receive`` gives (ASGI messages); every error is an answer."""
        headers = dict(scope["headers"])
        try:
            self._guard(scope["path"], headers)
            body = await self._read_body(receive)
            return await self._infer(body, headers, *route.groups(default=""))
        except ServerError as exc:
            return exc.status, _JSON_HEADERS, error_body(str(exc))
        except Exception:
            log.exception("unexpected error on %s", scope["path"])
            return 500, _JSON_HEADERS, error_body("internal error")

    def _guard(self, path: str, headers: dict) -> None:
        if self.expected and path not in OPEN_PATHS:
            if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
                raise UnauthorizedError("authorization: missing or wrong bearer token")
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            raise RequestTooLargeError(
                f"body: {int(length)} bytes exceed the limit of {self.max_bytes}")

    async def _read_body(self, receive) -> bytes:
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise InvalidRequestError("body: the client disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise RequestTooLargeError(f"body: more than {self.max_bytes} bytes")
            chunks.append(chunk)
            more = message.get("more_body", False)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # one chunk: no copy

    async def _infer(self, body: bytes, headers: dict, model: str, version: str):
        header_length = headers.get(_HEADER_LENGTH_KEY)
        args = (header_length.decode("latin-1") if header_length is not None else None,
                model, version, self.plans, self.limits)
        coding = _content_coding(headers.get(b"content-encoding"))
        if coding is not None:  # inflating takes long whatever the compressed size
            request, wishes = await asyncio.to_thread(self._decode_inflated, body, coding, args)
        elif len(body) > OFFLOAD_BYTES:
            request, wishes = await asyncio.to_thread(decode_infer_request, body, *args)
        else:
            request, wishes = decode_infer_request(body, *args)
        response = await self.plane.infer(request)
        accepted = headers.get(b"accept-encoding")
        coding = preferred_encoding(accepted.decode("latin-1")) if accepted and self.answer_level else None
        if _output_bytes(response) > (DEFLATE_INLINE_BYTES if coding else OFFLOAD_BYTES):
            payload, json_length, coding = await asyncio.to_thread(self._encode, response, wishes, coding)
        else:
            payload, json_length, coding = self._encode(response, wishes, coding)
        response_headers = _JSON_HEADERS if json_length is None else (
            _BINARY_HEADERS + [(_HEADER_LENGTH_KEY, str(json_length).encode())])
        if coding is not None:
            response_headers = response_headers + [(b"content-encoding", coding.encode())]
        return 200, response_headers, payload

    def _decode_inflated(self, body: bytes, coding: str, args: tuple):
        try:
            body = inflate(body, coding, self.max_bytes)
        except InflateLimitError:
            raise RequestTooLargeError(f"body: {coding} data inflating past the limit of "
                                       f"{self.max_bytes} bytes") from None
        except InflateError as exc:
            raise InvalidRequestError(f"body: Content-Encoding {coding}, but {exc}") from None
        return decode_infer_request(body, *args)

    def _encode(self, response, wishes: dict, coding: Optional[str]):
        """The answer's body, its JSON header's length (binary outputs) and its encoding:
        deflated with ``coding`` when given and the body is worth it."""
        payload, json_length = encode_infer_response(response, wishes)
        if coding is None or len(payload) < DEFLATE_MIN_BYTES:
            return payload, json_length, None
        return deflate(payload, coding, self.answer_level), json_length, coding

    def _limited(self, receive):
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise RequestTooLargeError(f"body: more than {self.max_bytes} bytes")
            return message

        return limited_receive


def _content_coding(value: Optional[bytes]) -> Optional[str]:
    """The encoding a request's ``Content-Encoding`` names (None: identity)."""
    coding = value.decode("latin-1").strip().lower() if value is not None else ""
    if coding in ("", "identity"):
        return None
    if coding not in ENCODINGS:
        raise UnsupportedEncodingError(f"Content-Encoding {coding!r}: this server inflates "
                                       f"{' or '.join(ENCODINGS)} bodies (or takes identity)")
    return coding


def _output_bytes(response) -> int:
    return sum(array.nbytes for array in response.outputs.values())


def build_http_app(plane: DataPlane) -> FrontDoor:
    """The ASGI app serving ``plane`` (``.app`` is the FastAPI app behind it)."""
    app = FastAPI(
        title="flowserve",
        version=server_version(),
        description="Open Inference Protocol (KServe v2) REST API with Triton's extensions.",
    )
    _install_error_handlers(app)
    app.include_router(_health_routes(plane))
    app.include_router(_repository_routes(plane))  # before /v2/models/{name}: owns .../stats
    app.include_router(_shared_memory_routes(plane))
    app.include_router(_model_routes(plane))
    _document_infer(app)
    return FrontDoor(app, plane)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServerError)
    async def server_error(request: Request, exc: ServerError):
        return _error(str(exc), exc.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        field = ".".join(str(p) for p in first["loc"])
        return _error(f"{field}: {first['msg']}", 400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return _error(str(exc.detail), exc.status_code)

    @app.exception_handler(ClientDisconnect)
    async def client_left(request: Request, exc: ClientDisconnect):  # or timed out: no one to tell
        return _error("body: the client disconnected", 400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        log.exception("unexpected error on %s", request.url.path)
        return _error(f"internal error: {type(exc).__name__}", 500)


def _health_routes(plane: DataPlane) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/v2/health/live", responses={200: {"model": schemas.LiveBody}})
    async def server_live():
        """Liveness: 200 while the process serves requests."""
        return _json({"live": plane.live()})

    @router.get("/v2/health/ready", responses={200: {"model": schemas.ReadyBody}, **schemas.ERRORS})
    async def server_ready():
        """Readiness: 200 when every model is loaded, 400 otherwise (and with no model)."""
        ready = plane.ready()
        return _json({"ready": ready}, 200 if ready else 400)

    @router.get("/v2", responses={200: {"model": schemas.ServerMetadataBody}})
    async def server_metadata():
        """Server name, version and protocol extensions."""
        return _json(plane.server_metadata())

    @router.get("/metrics", tags=["operations"], response_class=Response)
    async def metrics():
        """Prometheus metrics."""
        return Response(plane.metrics.render(), media_type=plane.metrics.content_type)

    return router


def _model_routes(plane: DataPlane) -> APIRouter:
    router = APIRouter(tags=["models"])

    async def model_metadata(model_name: str, model_version: str = ""):
        """Inputs, outputs and versions of a model."""
        return _json(plane.model_metadata(model_name, model_version))

    async def model_ready(model_name: str, model_version: str = ""):
        """200 when the model is ready, 4xx when not (the body says why)."""
        try:
            plane.model(model_name, model_version)  # unknown: 404
        except ModelNotReadyError as exc:
            return _error(str(exc), 400)  # the protocol answers "false" with a 4xx
        return _json({"ready": True})

    async def model_config(model_name: str, model_version: str = ""):
        """Triton-style model configuration."""
        return _json(plane.model_config(model_name, model_version))

    async def model_stats(model_name: str, model_version: str = ""):
        """Triton-style statistics of one model."""
        return _json(plane.statistics(model_name, model_version))

    errors = schemas.ERRORS
    for suffix in VERSIONED:
        base = "/v2/models/{model_name}" + suffix
        router.add_api_route(base, model_metadata, methods=["GET"],
                             responses={200: {"model": schemas.ModelMetadataBody}, **errors})
        router.add_api_route(base + "/ready", model_ready, methods=["GET"],
                             responses={200: {"model": schemas.ReadyBody}, **errors})
        router.add_api_route(base + "/config", model_config, methods=["GET"], responses=errors)
        router.add_api_route(base + "/stats", model_stats, methods=["GET"], responses=errors)
    return router


def _document_infer(app: FastAPI) -> None:
    """Add ``POST .../infer`` (served by ``FrontDoor``) to the app's OpenAPI document."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            spec = build()
            for suffix in VERSIONED:
                spec["paths"]["/v2/models/{model_name}" + suffix + "/infer"] = {
                    "post": _infer_operation(suffix, spec)}
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi


def _infer_operation(suffix: str, spec: dict) -> dict:
    names = ["model_name"] + (["model_version"] if suffix else [])
    responses = {"200": {"description": "Outputs", "content": {"application/json": {
        "schema": schemas.inline_schema(schemas.InferenceResponseBody)}}}}
    for code in schemas.ERRORS:
        responses[str(code)] = {"description": "Error", "content": {"application/json": {
            "schema": schemas.inline_schema(schemas.ErrorBody)}}}
    return {
        "tags": ["models"], "summary": "Model Infer",
        "description": "Run inference: JSON tensors or the binary tensor extension "
                       "(Inference-Header-Content-Length).",
        "operationId": "model_infer" + ("_versioned" if suffix else ""),
        "parameters": [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                       for n in names],
        **schemas.body_schema(schemas.InferenceRequestBody),
        "responses": responses,
    }


async def _optional_json(request: Request) -> dict:
    body = await request.body()
    if not body.strip():
        return {}
    value = parse_json(body)
    if not isinstance(value, dict):
        raise InvalidRequestError("body: expected a JSON object")
    return value


def _repository_routes(plane: DataPlane) -> APIRouter:
    router = APIRouter(tags=["repository"])

    @router.get("/v2/models/stats", responses=schemas.ERRORS)
    async def all_stats():
        """Triton-style statistics of every loaded model."""
        return _json(plane.statistics())

    @router.post("/v2/repository/index", responses=schemas.ERRORS,
                 openapi_extra=schemas.body_schema(schemas.RepositoryIndexRequestBody))
    async def repository_index(request: Request):
        """Every model in the repository with its state (``{"ready": true}``: ready only)."""
        ready = (await _optional_json(request)).get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidRequestError("ready: expected true or false")
        return _json(plane.repository_index(ready))

    async def parameters_of(request: Request) -> dict:
        parameters = (await _optional_json(request)).get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InvalidRequestError("parameters: expected a JSON object")
        return parameters

    @router.post("/v2/repository/models/{model_name}/load", responses=schemas.ERRORS,
                 openapi_extra=schemas.body_schema(schemas.LoadRequestBody))
    async def load_model(request: Request, model_name: str):
        """(Re)load a model of the repository (needs --allow-model-control)."""
        await plane.load_model(model_name, await parameters_of(request))
        return _json({})

    @router.post("/v2/repository/models/{model_name}/unload", responses=schemas.ERRORS,
                 openapi_extra=schemas.body_schema(schemas.LoadRequestBody))
    async def unload_model(request: Request, model_name: str):
        """Unload a model (needs --allow-model-control); queued requests finish."""
        await plane.unload_model(model_name, await parameters_of(request))
        return _json({})

    return router


def _shared_memory_routes(plane: DataPlane) -> APIRouter:
    """Triton's system shared-memory extension (needs ``--allow-client-shm``)."""
    router = APIRouter(tags=["shared memory"])
    regions = plane.shared_memory

    async def status(region_name: str = ""):
        """Registered regions (all, or the one named) as ``[{name, key, offset, byte_size}]``."""
        return _json(regions.status(region_name))

    async def unregister(region_name: str = ""):
        """Forget a region (all regions without a name)."""
        regions.unregister(region_name)
        return _json({})

    for prefix in ("/v2/systemsharedmemory", "/v2/systemsharedmemory/region/{region_name}"):
        router.add_api_route(prefix + "/status", status, methods=["GET"], responses=schemas.ERRORS)
        router.add_api_route(prefix + "/unregister", unregister, methods=["POST"],
                             responses=schemas.ERRORS)

    @router.post("/v2/systemsharedmemory/region/{region_name}/register", responses=schemas.ERRORS,
                 openapi_extra=schemas.body_schema(schemas.SharedMemoryRegisterBody))
    async def register(request: Request, region_name: str):
        """Register ``byte_size`` bytes at ``offset`` into the shared-memory object ``key``."""
        body = await _optional_json(request)
        unknown = sorted(set(body) - {"key", "offset", "byte_size"})
        if unknown or "key" not in body or "byte_size" not in body:
            raise InvalidRequestError(f"body: expected {{\"key\", \"byte_size\", \"offset\" (optional)}}, "
                                      f"got the fields {sorted(body)}")
        regions.register(region_name, body["key"], body.get("offset", 0), body["byte_size"])
        return _json({})

    async def cuda_status(region_name: str = ""):
        """CUDA shared-memory regions: always none (they are refused)."""
        return _json(regions.cuda_status(region_name))

    async def cuda_unregister(region_name: str = ""):
        """Nothing to forget: no CUDA region is ever registered."""
        regions.cuda_unregister(region_name)
        return _json({})

    async def cuda_register(region_name: str):
        """Refused: tensors travel in system shared memory only."""
        regions.cuda_register(region_name)

    for prefix in ("/v2/cudasharedmemory", "/v2/cudasharedmemory/region/{region_name}"):
        router.add_api_route(prefix + "/status", cuda_status, methods=["GET"], responses=schemas.ERRORS)
        router.add_api_route(prefix + "/unregister", cuda_unregister, methods=["POST"],
                             responses=schemas.ERRORS)
    router.add_api_route("/v2/cudasharedmemory/region/{region_name}/register", cuda_register,
                         methods=["POST"], responses=schemas.ERRORS)

    return router
