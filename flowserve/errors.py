"""One exception hierarchy for all of flowserve.

Every error a user sees says what was expected, what was given, and where: the op
and module scope, the user's source line, the file of a saved directory, or the
field of a request. Front ends map these classes to their protocol's codes in one
place (the ``status`` attribute carries the HTTP status a server should answer).
"""

from __future__ import annotations


class FlowserveError(Exception):
    """Base class of every error flowserve raises on purpose."""

    status = 500


class ShapeError(FlowserveError, ValueError):
    """An op got inputs whose shapes it cannot take."""

    status = 400


class DTypeError(FlowserveError, TypeError):
    """An op got inputs whose dtypes it cannot take."""

    status = 400


class DeviceError(FlowserveError, RuntimeError):
    """A device was asked for that is not usable here, or tensors are on different devices."""


class AutogradError(FlowserveError, RuntimeError):
    """Gradients were asked for where none can be computed."""


class GraphError(FlowserveError, RuntimeError):
    """nn.Graph was used against its rules (build, tracing, static inputs)."""


class SavedGraphError(FlowserveError, ValueError):
    """A saved directory or file is missing, corrupted, or of an unknown format."""

    status = 400


class ExportError(FlowserveError, RuntimeError):
    """The IR could not be lowered to ONNX, or the exported model failed its checks."""


class DistributedError(FlowserveError, RuntimeError):
    """Processes of a distributed run could not meet, a collective failed or timed out,
    or a rank is gone. The message is one line naming the rank and the peer."""
