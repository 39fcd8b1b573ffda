"""``inference.ModelInferRequest``/``ModelInferResponse`` <-> the data plane's types.

Inputs arrive as ``raw_input_contents`` (one blob per input, the way
tritonclient sends them) or as typed ``contents``; outputs always leave as
``raw_output_contents``, as Triton sends them. ``split_raw_inputs`` takes the blobs out of
a serialised request as views of its bytes, so that protobuf parses only the rest::

    rest, blobs = split_raw_inputs(raw)
    request = decode_infer_request(protos.ModelInferRequest.FromString(rest), blobs=blobs)
    message = encode_infer_response(response)
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from flowserve.protocol import protos  # the one copy of the wire protocol
from flowserve.protocol.tensors import array_to_raw

from ..dataplane import InferenceRequest, InferenceResponse, refuse_sequence
from ..datatypes import (
    DecodeLimits,
    array_from_raw,
    check_bytes_elements,
    element_count,
    numpy_dtype,
)
from ..errors import InvalidRequestError
from ..shared_memory import SharedInput, shared_tensor

CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


RAW_INPUT_FIELD = protos.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5  # protobuf's wire types (groups: none)
MAX_VARINT_BYTES = 10


def split_raw_inputs(raw: bytes) -> Optional[tuple[bytes, list[memoryview]]]:
    """A serialised ``ModelInferRequest`` as its fields other than ``raw_input_contents``
    (bytes, for protobuf to parse) and its ``raw_input_contents`` blobs in order, as views
    of ``raw``: protobuf's parser would copy each blob twice (into its arena, then into a
    ``bytes``), 600 KB for one 224x224 image. None when ``raw`` is not made of the plain
    wire types this walks (a group, a field cut short, field number 0): protobuf's parser
    then judges the whole message, as it would have."""
    view, end = memoryview(raw), len(raw)
    rest, blobs, kept_from, offset = [], [], 0, 0
    while offset < end:
        field_start = offset
        key, offset = _varint(raw, offset)
        if key is None or key >> 3 == 0:
            return None
        kind = key & 7
        if kind == VARINT:
            value, offset = _varint(raw, offset)
            if value is None:
                return None
        elif kind in (FIXED64, FIXED32):
            offset += 8 if kind == FIXED64 else 4
        elif kind == LENGTH_DELIMITED:
            size, offset = _varint(raw, offset)
            if size is None or offset + size > end:
                return None
            if key >> 3 == RAW_INPUT_FIELD:
                rest.append(view[kept_from:field_start])
                blobs.append(view[offset:offset + size])
                kept_from = offset + size
            offset += size
        else:
            return None
    if offset > end:
        return None
    if not blobs:
        return raw, blobs
    rest.append(view[kept_from:])
    return b"".join(rest), blobs


def _varint(raw: bytes, offset: int) -> tuple[Optional[int], int]:
    """The base-128 varint at ``offset`` and the offset after it; None when cut short or
    longer than ``MAX_VARINT_BYTES``."""
    value = shift = 0
    for index in range(offset, min(offset + MAX_VARINT_BYTES, len(raw))):
        byte = raw[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    return None, offset


def decode_infer_request(message, limits: DecodeLimits = DecodeLimits(),
                         blobs: Optional[Sequence] = None) -> InferenceRequest:
    """An ``InferenceRequest`` from a ``ModelInferRequest`` message. ``raw_input_contents``
    (or ``blobs``, the message's blobs taken out by ``split_raw_inputs``) holds one blob per
    input whose data is not in shared memory, in order (as Triton reads it)."""
    raw = message.raw_input_contents if blobs is None else blobs
    inputs, used = {}, 0
    for tensor in message.inputs:
        where = f"input {tensor.name!r}"
        if tensor.name in inputs:
            raise InvalidRequestError(f"{where}: given twice")
        shape, place = list(tensor.shape), _shared(tensor, where)
        if place is not None:
            if tensor.HasField("contents"):
                raise InvalidRequestError(f"{where}: data in shared memory (shared_memory_region) "
                                          "and in contents at once")
            element_count(shape, where)
            inputs[tensor.name] = SharedInput(place, tensor.datatype, shape)
        elif raw:
            if used == len(raw):
                _refuse_blob_count(message, len(raw))
            inputs[tensor.name] = array_from_raw(raw[used], tensor.datatype, shape, where,
                                                 limits.max_bytes_elements)
            used += 1
        else:
            inputs[tensor.name] = _from_contents(tensor, shape, where, limits)
    if used != len(raw):
        _refuse_blob_count(message, len(raw))
    outputs = [o.name for o in message.outputs] or None
    refuse_sequence(_sequence_id(message))
    shared = {}
    for tensor in message.outputs:
        place = _shared(tensor, f"output {tensor.name!r}")
        if place is not None:
            shared[tensor.name] = place
    return InferenceRequest(message.model_name, message.model_version, inputs, outputs,
                            message.id, _timeout(message), _classification(message), shared)


def _shared(tensor, where: str):
    """The shared-memory place a tensor's parameters name (None: its data is in the message)."""
    return shared_tensor(plain_parameters(tensor.parameters), where) if tensor.parameters else None


def _refuse_blob_count(message, blob_count: int) -> None:
    in_message = sum(_shared(t, "") is None for t in message.inputs)
    raise InvalidRequestError(f"raw_input_contents: {blob_count} blobs for "
                              f"{in_message} inputs not in shared memory")


INTEGER_PARAMETERS = ("int64_param", "uint64_param")


def parameter_value(parameter) -> tuple[Optional[str], Any]:
    """Which field of a parameter message (``InferParameter``, ``ModelRepositoryParameter``)
    is set, and its value; ``(None, None)`` when none is."""
    choice = parameter.WhichOneof("parameter_choice")
    return choice, getattr(parameter, choice) if choice else None


def plain_parameters(parameters) -> dict:
    """A parameter map as plain values (``{"shared_memory_byte_size": 64, ...}``)."""
    return {name: parameter_value(value)[1] for name, value in parameters.items()}


def _classification(message) -> dict:
    """``{output: count}`` of the outputs asked for as top classes (an int64_param)."""
    classes = {}
    for tensor in message.outputs:
        if "classification" not in tensor.parameters:
            continue
        choice, count = parameter_value(tensor.parameters["classification"])
        if choice not in INTEGER_PARAMETERS or count < 0:
            raise InvalidRequestError(f"output {tensor.name!r}: parameters.classification: expected "
                                      "a count of classes as int64_param")
        if count:
            classes[tensor.name] = count
    return classes


def _sequence_id(message):
    if "sequence_id" not in message.parameters:
        return None
    return parameter_value(message.parameters["sequence_id"])[1]


def _timeout(message):
    if "timeout" not in message.parameters:
        return None
    choice, micros = parameter_value(message.parameters["timeout"])
    if choice not in INTEGER_PARAMETERS:
        raise InvalidRequestError("parameters.timeout: expected microseconds as int64_param")
    if not 0 <= micros < 2**63:
        raise InvalidRequestError("parameters.timeout: expected non-negative microseconds")
    return micros / 1e6 or None


def _from_contents(tensor, shape: list, where: str, limits: DecodeLimits) -> np.ndarray:
    dtype = numpy_dtype(tensor.datatype, where)
    count = element_count(shape, where)
    if tensor.datatype == "BYTES":
        check_bytes_elements(count, limits.max_bytes_elements, where)
    field = CONTENTS_FIELD.get(tensor.datatype)
    if field is None:
        raise InvalidRequestError(f"{where}: {tensor.datatype} data must come in "
                                  "raw_input_contents")
    values = getattr(tensor.contents, field)
    if len(values) != count:
        raise InvalidRequestError(
            f"{where}: contents.{field} has {len(values)} elements, shape {shape} needs {count}"
        )
    if tensor.datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    wide = np.array(values)  # int64/uint64/float64/bool: every proto field fits losslessly
    if dtype.kind in "iu" and wide.size:
        info = np.iinfo(dtype)
        if wide.min() < info.min or wide.max() > info.max:
            raise InvalidRequestError(f"{where}: contents.{field} holds values outside the "
                                      f"range of {tensor.datatype} [{info.min}, {info.max}]")
    return wide.astype(dtype).reshape(shape)


def encode_infer_response(response: InferenceResponse):
    """A ``ModelInferResponse`` carrying the outputs as raw contents; an output written to
    shared memory has an empty blob (one blob per output, as Triton sends) and says where."""
    message = protos.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for name, array in response.outputs.items():
        tensor = message.outputs.add()
        tensor.name = name
        tensor.datatype = response.datatypes[name]
        tensor.shape.extend(array.shape)
        place = response.shared.get(name)
        if place is None:
            message.raw_output_contents.append(array_to_raw(array))
            continue
        message.raw_output_contents.append(b"")
        tensor.parameters["shared_memory_region"].string_param = place.region
        tensor.parameters["shared_memory_byte_size"].int64_param = place.byte_size
        tensor.parameters["shared_memory_offset"].int64_param = place.offset
    return message
