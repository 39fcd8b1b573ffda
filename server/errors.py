"""Errors the serving core raises; each carries the HTTP status it answers with.

Front ends map these in one place each: the HTTP app has one exception handler
that answers ``{"error": str(exc)}`` with ``exc.status``, the gRPC servicer one
table from ``status`` to a gRPC status code (``GRPC_CODES`` in ``grpc.app``).
"""

from __future__ import annotations

from flowserve.errors import FlowserveError


class ServerError(FlowserveError):
    """Base class of serving errors; ``status`` is the HTTP status code."""

    status = 500


class InvalidRequestError(ServerError, ValueError):
    """The request is malformed or does not fit the model (names the field)."""

    status = 400


class UnauthorizedError(ServerError):
    """The request lacks the bearer token the server was started with."""

    status = 401


class ModelControlDisabledError(ServerError):
    """Explicit load/unload was asked for but the server was started without it."""

    status = 403


class ModelNotFoundError(ServerError, LookupError):
    """No model (or model version) of that name is in the repository."""

    status = 404


class RequestTooLargeError(ServerError):
    """The request body is larger than ``max_request_bytes``."""

    status = 413


class UnsupportedEncodingError(ServerError):
    """The request body's ``Content-Encoding`` is not one the server inflates."""

    status = 415


class ModelNotReadyError(ServerError):
    """The model exists but is not loaded (failed to load, unloaded, loading)."""

    status = 503


class QueueFullError(ServerError):
    """The model's batching queue is full; retry later."""

    status = 503


class RequestTimeoutError(ServerError, TimeoutError):
    """The request waited in the queue longer than its timeout."""

    status = 503


class ModelLoadError(ServerError):
    """A model directory or file could not be loaded (names the file)."""

    status = 400


class InferenceFailedError(ServerError):
    """ONNX Runtime refused or failed to run a batch (message from the runtime)."""

    status = 400


class ServerConfigError(FlowserveError, ValueError):
    """A server option names something unusable (a certificate file that is not one)."""
