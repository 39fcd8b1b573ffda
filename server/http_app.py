"""The HTTP front end: Open Inference Protocol REST routes over the ``DataPlane``.

Handlers only translate: read the body, decode with ``http_codec``, call the
data plane, encode. ``ServerError``s become ``{"error": msg}`` with their
status in one handler; auth and the body-size limit are one ASGI guard::

    app = build_http_app(plane)      # a FastAPI app; serve it with uvicorn
"""

from __future__ import annotations

import json
import logging
import re

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import http_schemas as schemas
from .dataplane import DataPlane, server_version
from .errors import (
    InvalidRequestError,
    ModelNotReadyError,
    RequestTooLargeError,
    ServerError,
    UnauthorizedError,
)
from .http_codec import HEADER_LENGTH, decode_infer_request, encode_infer_response

_HEADER_LENGTH_KEY = HEADER_LENGTH.encode()

log = logging.getLogger("flowserve.server")

JSON = "application/json"
OPEN_PATHS = ("/v2/health/live", "/v2/health/ready")
VERSIONED = ("", "/versions/{model_version}")


def _json(body, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")).encode(), status, media_type=JSON)


def _error(message: str, status: int) -> Response:
    return _json({"error": message}, status)


def _error_body(exc: ServerError) -> bytes:
    return json.dumps({"error": str(exc)}, separators=(",", ":")).encode()


INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
_JSON_HEADERS = [(b"content-type", JSON.encode())]
_BINARY_HEADERS = [(b"content-type", b"application/octet-stream")]


async def _send_body(send, status: int, headers: list, body: bytes) -> None:
    """One complete response as two ASGI messages (no Response object per request)."""
    await send({"type": "http.response.start", "status": status,
                "headers": headers + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class FrontDoor:
    """Outermost ASGI app: auth, the body-size limit, and the infer fast path.

    ``POST .../infer`` is served here directly (the same codec and data plane as
    the documented FastAPI route, without FastAPI's per-request routing and
    dependency machinery, which costs more than a small model's inference);
    every other request goes on to FastAPI.
    """

    def __init__(self, app, plane: DataPlane):
        self.app, self.plane = app, plane
        settings = plane.settings
        self.max_bytes = settings.max_request_bytes
        self.expected = f"Bearer {settings.auth_token}".encode() if settings.auth_token else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        match = INFER_PATH.match(path) if scope["method"] == "POST" else None
        headers = dict(scope["headers"])
        try:
            self._guard(path, headers)
            if match is None:
                return await self.app(scope, self._limited(receive), send)
            body = await self._read_body(receive)
            status, response_headers, payload = await self._infer(
                body, headers, *match.groups(default=""))
        except ServerError as exc:
            status, response_headers, payload = exc.status, _JSON_HEADERS, _error_body(exc)
        except Exception:
            log.exception("unexpected error on %s", path)
            status, response_headers, payload = 500, _JSON_HEADERS, b'{"error":"internal error"}'
        await _send_body(send, status, response_headers, payload)

    def _guard(self, path: str, headers: dict) -> None:
        if self.expected and path not in OPEN_PATHS:
            if headers.get(b"authorization") != self.expected:
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
        return b"".join(chunks)

    async def _infer(self, body: bytes, headers: dict, model: str, version: str):
        header_length = headers.get(_HEADER_LENGTH_KEY)
        request, wishes = decode_infer_request(
            body, header_length.decode("latin-1") if header_length is not None else None,
            model, version)
        payload, json_length = encode_infer_response(await self.plane.infer(request), wishes)
        if json_length is None:
            return 200, _JSON_HEADERS, payload
        return 200, _BINARY_HEADERS + [(_HEADER_LENGTH_KEY, str(json_length).encode())], payload

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
    app.include_router(_model_routes(plane))
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

    async def model_infer(request: Request, model_name: str, model_version: str = ""):
        """Run inference: JSON tensors or the binary tensor extension."""
        body = await request.body()
        infer_request, wishes = decode_infer_request(
            body, request.headers.get(HEADER_LENGTH), model_name, model_version)
        response = await plane.infer(infer_request)
        payload, header_length = encode_infer_response(response, wishes)
        if header_length is None:
            return Response(payload, media_type=JSON)
        return Response(payload, media_type="application/octet-stream",
                        headers={"Inference-Header-Content-Length": str(header_length)})

    errors = schemas.ERRORS
    for suffix in VERSIONED:
        base = "/v2/models/{model_name}" + suffix
        router.add_api_route(base, model_metadata, methods=["GET"],
                             responses={200: {"model": schemas.ModelMetadataBody}, **errors})
        router.add_api_route(base + "/ready", model_ready, methods=["GET"],
                             responses={200: {"model": schemas.ReadyBody}, **errors})
        router.add_api_route(base + "/config", model_config, methods=["GET"], responses=errors)
        router.add_api_route(base + "/stats", model_stats, methods=["GET"], responses=errors)
        router.add_api_route(
            base + "/infer", model_infer, methods=["POST"],
            responses={200: {"model": schemas.InferenceResponseBody}, **errors},
            openapi_extra=schemas.body_schema(schemas.InferenceRequestBody))
    return router


async def _optional_json(request: Request) -> dict:
    body = await request.body()
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"body: malformed JSON ({exc})") from None
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

    async def checked_load_body(request: Request) -> None:
        if (await _optional_json(request)).get("parameters"):
            raise InvalidRequestError(
                "parameters: refused; models load only from files in the repository")

    @router.post("/v2/repository/models/{model_name}/load", responses=schemas.ERRORS,
                 openapi_extra=schemas.body_schema(schemas.LoadRequestBody))
    async def load_model(request: Request, model_name: str):
        """(Re)load a model of the repository (needs --allow-model-control)."""
        await checked_load_body(request)
        await plane.load_model(model_name)
        return _json({})

    @router.post("/v2/repository/models/{model_name}/unload", responses=schemas.ERRORS,
                 openapi_extra=schemas.body_schema(schemas.LoadRequestBody))
    async def unload_model(request: Request, model_name: str):
        """Unload a model (needs --allow-model-control); queued requests finish."""
        await checked_load_body(request)
        await plane.unload_model(model_name)
        return _json({})

    return router
