"""The clients' own exceptions (clients import nothing from flowserve but its protocol,
``flowserve.protocol``)."""

from __future__ import annotations

from typing import Optional


class ClientError(Exception):
    """Base class of every error a flowserve client raises."""


class InferenceServerError(ClientError):
    """The server answered with an error; ``status`` is its HTTP status or gRPC code name.

    >>> str(InferenceServerError("unknown model 'x'", 404))
    "[404] unknown model 'x'"
    """

    def __init__(self, message: str, status: Optional[object] = None):
        super().__init__(message)
        self.message, self.status = message, status

    def __str__(self) -> str:
        return f"[{self.status}] {self.message}" if self.status is not None else self.message


class ServerUnreachableError(ClientError, ConnectionError):
    """No connection to the server could be made (or it closed mid-request)."""


class ProtocolError(ClientError, ValueError):
    """The server's answer does not follow the Open Inference Protocol."""
