"""``inference.ModelInferRequest``/``ModelInferResponse`` <-> the data plane's types.

Inputs arrive as ``raw_input_contents`` (one blob per input, the way
tritonclient sends them) or as typed ``contents``; outputs always leave as
``raw_output_contents``, as Triton sends them::

    request = decode_infer_request(message)
    message = encode_infer_response(response)
"""

from __future__ import annotations

import numpy as np

from flowserve.clients import protos  # the one copy of the wire protocol
from .dataplane import InferenceRequest, InferenceResponse
from .datatypes import array_from_raw, array_to_raw, element_count, numpy_dtype
from .errors import InvalidRequestError

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


def decode_infer_request(message) -> InferenceRequest:
    """An ``InferenceRequest`` from a ``ModelInferRequest`` message."""
    raw = message.raw_input_contents
    if raw and len(raw) != len(message.inputs):
        raise InvalidRequestError(
            f"raw_input_contents: {len(raw)} blobs for {len(message.inputs)} inputs"
        )
    inputs = {}
    for index, tensor in enumerate(message.inputs):
        where = f"input {tensor.name!r}"
        if tensor.name in inputs:
            raise InvalidRequestError(f"{where}: given twice")
        shape = list(tensor.shape)
        if raw:
            inputs[tensor.name] = array_from_raw(raw[index], tensor.datatype, shape, where)
        else:
            inputs[tensor.name] = _from_contents(tensor, shape, where)
    outputs = [o.name for o in message.outputs] or None
    return InferenceRequest(message.model_name, message.model_version, inputs, outputs,
                            message.id, _timeout(message))


def _timeout(message):
    if "timeout" not in message.parameters:
        return None
    micros = message.parameters["timeout"].int64_param
    if micros < 0:
        raise InvalidRequestError("parameters.timeout: expected non-negative microseconds")
    return micros / 1e6 or None


def _from_contents(tensor, shape: list, where: str) -> np.ndarray:
    dtype = numpy_dtype(tensor.datatype, where)
    count = element_count(shape, where)
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
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except OverflowError:
        raise InvalidRequestError(f"{where}: contents outside the range of "
                                  f"{tensor.datatype}") from None


def encode_infer_response(response: InferenceResponse):
    """A ``ModelInferResponse`` carrying the outputs as raw contents."""
    message = protos.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for name, array in response.outputs.items():
        tensor = message.outputs.add()
        tensor.name = name
        tensor.datatype = response.datatypes[name]
        tensor.shape.extend(array.shape)
        message.raw_output_contents.append(array_to_raw(array))
    return message
