"""JSON schemas of the Open Inference Protocol REST bodies, for the OpenAPI docs.

The handlers parse bodies themselves (binary extension, speed), so these models
only document: ``/openapi.json`` and ``/docs`` show them, and the fuzz test
generates requests from them.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, Field

Parameters = dict[str, Union[bool, int, float, str]]


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": "what went wrong and where"}``."""

    error: str


class LiveBody(BaseModel):
    live: bool


class ReadyBody(BaseModel):
    ready: bool


class ServerMetadataBody(BaseModel):
    name: str
    version: str
    extensions: list[str]


class TensorMetadataBody(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadataBody(BaseModel):
    name: str
    versions: list[str] = []
    platform: str
    inputs: list[TensorMetadataBody]
    outputs: list[TensorMetadataBody]


class RequestInput(BaseModel):
    """One input tensor: JSON ``data`` or ``parameters.binary_data_size`` bytes."""

    name: str
    shape: list[int]
    datatype: str = Field(examples=["FP32"])
    parameters: Optional[Parameters] = None
    data: Optional[list[Any]] = None


class RequestOutput(BaseModel):
    """An output to return; ``parameters.binary_data`` asks for raw bytes."""

    name: str
    parameters: Optional[Parameters] = None


class InferenceRequestBody(BaseModel):
    """``POST .../infer`` body (the JSON header when binary data follows)."""

    id: Optional[str] = None
    parameters: Optional[Parameters] = None
    inputs: list[RequestInput]
    outputs: Optional[list[RequestOutput]] = None


class ResponseOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: Optional[Parameters] = None
    data: Optional[list[Any]] = None


class InferenceResponseBody(BaseModel):
    model_name: str
    model_version: Optional[str] = None
    id: Optional[str] = None
    parameters: Optional[Parameters] = None
    outputs: list[ResponseOutput]


class RepositoryIndexRequestBody(BaseModel):
    ready: Optional[bool] = None


class RepositoryIndexEntry(BaseModel):
    name: str
    version: str
    state: str
    reason: str


class LoadRequestBody(BaseModel):
    """Load takes no parameters (models load only from the repository); unload takes
    ``unload_dependents`` (true or false), which tritonclient sends on every unload."""

    parameters: Optional[Parameters] = None


class SharedMemoryRegisterBody(BaseModel):
    """A system shared-memory region: ``byte_size`` bytes at ``offset`` into the object
    ``key`` (the name the client gave ``shm_open``)."""

    key: str
    offset: int = 0
    byte_size: int


def inline_schema(model: type[BaseModel]) -> dict:
    """JSON schema of ``model`` with every ``$ref`` replaced by its definition."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def expand(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return expand(definitions[node["$ref"].rsplit("/", 1)[-1]])
            return {key: expand(value) for key, value in node.items()}
        if isinstance(node, list):
            return [expand(item) for item in node]
        return node

    return expand(schema)


def body_schema(model: type[BaseModel]) -> dict:
    """``openapi_extra`` documenting ``model`` as a JSON request body."""
    return {
        "requestBody": {
            "required": model in (InferenceRequestBody, SharedMemoryRegisterBody),
            "content": {"application/json": {"schema": inline_schema(model)}},
        }
    }


ERRORS = {code: {"model": ErrorBody} for code in (400, 401, 403, 404, 413, 503)}
