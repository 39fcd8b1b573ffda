"""Open Inference Protocol REST bodies <-> ``InferenceRequest``/``InferenceResponse``.

JSON tensors carry ``data`` (nested or flat, row-major); the binary tensor
extension puts a JSON header of ``Inference-Header-Content-Length`` bytes first
and the tensors' raw bytes after it, each input saying its
``parameters.binary_data_size``. Outputs come back binary when the request asks
(``binary_data`` per output, ``binary_data_output`` for all)::

    request, binary = decode_infer_request(body, header_length=None, model="mlp")
    body, header_length = encode_infer_response(response, binary)
"""

from __future__ import annotations

import json
import math
from typing import Optional

import numpy as np
import orjson

from flowserve.protocol.tensors import array_to_raw

from ..dataplane import InferenceRequest, InferenceResponse, refuse_sequence
from ..datatypes import (
    DecodeLimits,
    array_from_raw,
    check_bytes_elements,
    datatype_of,
    element_count,
    numpy_dtype,
)
from ..errors import InvalidRequestError, RequestTooLargeError
from ..shared_memory import SharedInput, shared_tensor
from .json_arrays import LiftedArrays, lift_numeric_arrays

HEADER_LENGTH = "inference-header-content-length"


def _as_dict(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _as_list(value, where: str) -> list:
    if not isinstance(value, list):
        raise InvalidRequestError(f"{where}: expected a list, got {type(value).__name__}")
    return value


HEADER_LENGTH_DIGITS = 19  # a length beyond 64-bit integers is no length
_HEADER_STRINGS = 4096  # names, datatypes and keys of a header with many inputs


def parse_json(data, where: str = "body"):
    """The parsed JSON ``data``; every failure, deep nesting included, is a 400 naming ``where``.

    orjson parses what it can (UTF-8, at most 1024 levels deep, no ``NaN``/``Infinity``
    literals); anything it refuses is parsed again by ``json``, which accepts or refuses it,
    naming where, as before. orjson reads an integer beyond 64 bits as a float."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _parse_json_stdlib(data, where)


def _parse_json_stdlib(data, where: str):
    try:
        # a UTF-8 object decodes directly; UTF-16/32 need json's encoding detection
        if data[:1] == b"{" and data[1:2] != b"\0":
            return json.loads(data.decode("utf-8", "surrogatepass"))
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"{where}: malformed JSON ({exc})") from None
    except RecursionError:
        raise InvalidRequestError(f"{where}: malformed JSON (nested too deeply)") from None


def header_length_of(value: Optional[str], body_size: int) -> Optional[int]:
    """The ``Inference-Header-Content-Length`` as an int (ASCII digits within the body)."""
    if value is None:
        return None
    text = value.strip()
    if not (0 < len(text) <= HEADER_LENGTH_DIGITS and text.isascii() and text.isdigit()) or int(
            text) > body_size:
        raise InvalidRequestError(
            f"Inference-Header-Content-Length: {value[:40]!r} is not a length within the "
            f"{body_size}-byte body")
    return int(text)


def split_body(body: bytes | memoryview, header_length: Optional[str],
               limits: DecodeLimits = DecodeLimits()) -> tuple[dict, memoryview, LiftedArrays]:
    """The JSON header of ``body``, the binary part after it, and the long numeric
    ``data`` arrays of the header, parsed by simdjson into numpy (``json_arrays``)."""
    view = memoryview(body)
    length = header_length_of(header_length, len(body))
    if length is None:
        json_part, binary = body, view[len(view):]
    else:
        json_part, binary = bytes(view[:length]), view[length:]
    json_part, lifted = _lift_within_limits(json_part, limits)
    header, lifted = _parse_header(json_part, lifted)
    return _as_dict(header, "body"), binary, lifted


COUNTED_BODY_BYTES = 1 << 20  # every value of a shorter body counts for --max-json-elements


def _lift_within_limits(json_part: bytes, limits: DecodeLimits) -> tuple[bytes, LiftedArrays]:
    """``json_part`` with its long numeric arrays lifted, once it is known to hold no more
    values than the limits allow: every value of a body under ``COUNTED_BODY_BYTES``
    (counted before lifting), the values left to the JSON parser in a larger one (its
    lifted numbers cost 8 bytes each, not a Python object)."""
    if len(json_part) < COUNTED_BODY_BYTES:
        _check_json_size(json_part, limits)
        return lift_numeric_arrays(json_part)
    json_part, lifted = lift_numeric_arrays(json_part)
    _check_json_size(json_part, limits)
    return json_part, lifted


def _parse_header(json_part: bytes, lifted: LiftedArrays):
    """The parsed ``json_part`` and its lifted arrays. A body orjson refuses (most often
    for the ``NaN``/``Infinity`` literals, which ``json`` reads and Triton's clients write)
    has its numeric ``data`` arrays lifted whatever their size and is tried by orjson
    again; only if it still fails does the whole body go to ``json`` (slower, ~9x on a
    784-float request), which reads it or says where it is malformed in the body as sent."""
    try:
        return orjson.loads(json_part), lifted
    except orjson.JSONDecodeError:
        pass
    if not lifted.arrays:
        without_arrays, small = lift_numeric_arrays(json_part, body_bytes=0, array_bytes=0)
        if small.arrays:
            try:
                return orjson.loads(without_arrays), small
            except orjson.JSONDecodeError:
                pass
    return _parse_json_stdlib(json_part, "body"), lifted


def _check_json_size(json_part: bytes, limits: DecodeLimits) -> None:
    """Refuse JSON that would become more Python objects than the limits allow, before
    parsing it: each value but the last is followed by a comma, each string has 2 quotes.
    A body too short to reach a limit is not counted (counting costs more than orjson)."""
    values = json_part.count(b",") + 1 if len(json_part) >= limits.max_json_elements else 0
    if values > limits.max_json_elements:
        raise RequestTooLargeError(
            f"body: about {values} JSON values exceed the limit of {limits.max_json_elements} "
            "(--max-json-elements); send large tensors as binary data")
    if len(json_part) // 2 <= limits.max_bytes_elements + _HEADER_STRINGS:
        return
    strings = (json_part.count(b'"') - json_part.count(b'\\"')) // 2
    if strings > limits.max_bytes_elements + _HEADER_STRINGS:
        raise RequestTooLargeError(
            f"body: {strings} JSON strings exceed the limit of {limits.max_bytes_elements} "
            "BYTES elements (--max-bytes-elements)")


class PlanCache:
    """Parsed forms of binary-request JSON headers, by (header bytes, binary byte count).

    A client sending binary tensors repeats the same JSON header request after request;
    a header seen before (with as many binary bytes after it) is not parsed and checked
    again. Holds at most ``limit`` plans of headers up to ``header_limit`` bytes.
    """

    def __init__(self, limit: int = 512, header_limit: int = 4096):
        self.limit, self.header_limit = limit, header_limit
        self._plans: dict[tuple[bytes, int], tuple] = {}

    def key(self, body: bytes | memoryview, length: Optional[int]) -> Optional[tuple[bytes, int]]:
        if length is None or length > self.header_limit:
            return None
        return bytes(body[:length]), len(body) - length

    def get(self, key) -> Optional[tuple]:
        return self._plans.get(key) if key is not None else None

    def remember(self, key, request: InferenceRequest, wishes: dict, header: dict) -> None:
        specs, offset = [], 0
        for item in header["inputs"]:
            size = (item.get("parameters") or {}).get("binary_data_size")
            if size is None:  # JSON data lives in the header: nothing to reuse
                return
            specs.append((item["name"], item["datatype"], item["shape"], offset, size))
            offset += size
        if len(self._plans) >= self.limit:
            self._plans.clear()
        self._plans[key] = (specs, request.outputs, request.id, request.timeout_s, wishes,
                            request.classification, request.shared_outputs)


def decode_infer_request(body: bytes | memoryview, header_length: Optional[str], model: str,
                         version: str = "", plans: Optional[PlanCache] = None,
                         limits: DecodeLimits = DecodeLimits()) -> tuple[InferenceRequest, dict]:
    """Parse an infer body; returns the request and ``{output: binary?}`` wishes.

    Binary tensors share the body's memory where their elements are aligned (no copy).
    ``plans`` (the app's ``PlanCache``) skips parsing a binary request's header seen before.
    """
    key = plans.key(body, header_length_of(header_length, len(body))) if plans else None
    plan = plans.get(key) if key is not None else None
    if plan is not None:
        return _apply_plan(plan, memoryview(body)[len(key[0]):], model, version, limits)
    request, wishes, header = _decode_infer_request(body, header_length, model, version, limits)
    if key is not None:
        plans.remember(key, request, wishes, header)
    return request, wishes


def _apply_plan(plan: tuple, binary: memoryview, model: str, version: str, limits: DecodeLimits):
    specs, names, request_id, timeout_s, wishes, classes, shared = plan
    inputs = {
        name: array_from_raw(binary[start:start + size], datatype, shape, f"input {name!r}",
                             limits.max_bytes_elements)
        for name, datatype, shape, start, size in specs
    }
    return InferenceRequest(model, version, inputs, names, request_id, timeout_s, classes,
                            shared), wishes


def _decode_infer_request(body: bytes | memoryview, header_length: Optional[str], model: str,
                          version: str, limits: DecodeLimits) -> tuple[InferenceRequest, dict, dict]:
    header, binary, lifted = split_body(body, header_length, limits)
    params = _as_dict(header.get("parameters"), "parameters")
    inputs, offset = {}, 0
    for index, item in enumerate(_as_list(header.get("inputs"), "inputs")):
        where = f"inputs[{index}]"
        name, array, used = _decode_input(_as_dict(item, where), binary, offset, where, limits,
                                          lifted)
        if name in inputs:
            raise InvalidRequestError(f"{where}: input {name!r} given twice")
        inputs[name], offset = array, offset + used
    if offset != len(binary):
        raise InvalidRequestError(
            f"body: {len(binary) - offset} bytes of binary data are not claimed by any "
            "input's binary_data_size"
        )
    default_binary = _flag(params, "binary_data_output", False, "parameters")
    wishes, names, classes, shared = _decode_outputs(header.get("outputs"), default_binary)
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidRequestError("id: expected a string")
    timeout_s = _timeout(params)
    refuse_sequence(params.get("sequence_id"))
    request = InferenceRequest(model, version, inputs, names, request_id, timeout_s, classes, shared)
    return request, {"*": default_binary, **wishes}, header


MAX_TIMEOUT_US = 2**63 - 1


def _timeout(params: dict) -> Optional[float]:
    value = params.get("timeout")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TIMEOUT_US:
        raise InvalidRequestError("parameters.timeout: expected microseconds as an integer "
                                  f"in [0, {MAX_TIMEOUT_US}]")
    return value / 1e6 or None


def _flag(params: dict, key: str, default: bool, where: str) -> bool:
    value = params.get(key, default)
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{where}.{key}: expected true or false, got {value!r:.40}")
    return value


def _decode_outputs(items, default_binary: bool) -> tuple[dict, Optional[list], dict, dict]:
    """``{output: binary?}``, the names asked for (None: all), ``{output: classes}`` and
    ``{output: SharedTensor}`` (the outputs to write into shared memory)."""
    if items is None:
        return {}, None, {}, {}
    wishes, classes, shared = {}, {}, {}
    for index, item in enumerate(_as_list(items, "outputs")):
        item = _as_dict(item, f"outputs[{index}]")
        name = item.get("name")
        if not isinstance(name, str):
            raise InvalidRequestError(f"outputs[{index}].name: expected a string")
        where = f"outputs[{index}].parameters"
        params = _as_dict(item.get("parameters"), where)
        wishes[name] = _flag(params, "binary_data", default_binary, where)
        count = params.get("classification", 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InvalidRequestError(f"{where}.classification: expected a count of classes "
                                      f"(a non-negative integer), got {count!r:.40}")
        if count:
            classes[name] = count
        place = shared_tensor(params, f"output {name!r}")
        if place is not None:
            shared[name] = place
    return wishes, list(wishes) or None, classes, shared


def _decode_input(item: dict, binary: memoryview, offset: int, where: str, limits: DecodeLimits,
                  lifted: LiftedArrays):
    name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
    if not isinstance(name, str):
        raise InvalidRequestError(f"{where}.name: expected a string")
    where = f"input {name!r}"
    if not isinstance(datatype, str):
        raise InvalidRequestError(f"{where}: datatype: expected a string")
    shape = _as_list(shape, f"{where}: shape")
    count = element_count(shape, where)
    params = _as_dict(item.get("parameters"), f"{where}: parameters")
    size = params.get("binary_data_size")
    place = shared_tensor(params, where)
    if place is not None:
        if size is not None or "data" in item:
            raise InvalidRequestError(f"{where}: data in shared memory (shared_memory_region) "
                                      "and in the request at once")
        return name, SharedInput(place, datatype, shape), 0
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidRequestError(f"{where}: binary_data_size must be a non-negative integer")
        if offset + size > len(binary):
            raise InvalidRequestError(
                f"{where}: binary_data_size {size} runs past the end of the body "
                f"({len(binary) - offset} bytes left)"
            )
        raw = binary[offset : offset + size]
        return name, array_from_raw(raw, datatype, shape, where, limits.max_bytes_elements), size
    if "data" not in item:
        raise InvalidRequestError(f"{where}: neither data nor parameters.binary_data_size")
    if datatype == "BYTES":
        check_bytes_elements(count, limits.max_bytes_elements, where)
    data = lifted.take(item.pop("data"))  # lists are freed as soon as their array exists
    return name, array_from_json(data, datatype, shape, count, where), 0


def array_from_json(data, datatype: str, shape: list, count: int, where: str) -> np.ndarray:
    """Array of ``shape`` from JSON ``data`` (nested or flat lists, or a scalar)."""
    dtype = numpy_dtype(datatype, where)
    if datatype == "BYTES":
        flat = _flatten_bytes(data, where)
    else:
        loose = _numbers_of(data, datatype, where)
        _check_json_kind(loose, datatype, where)
        try:
            flat = loose.astype(dtype).reshape(-1)
        except (ValueError, TypeError, OverflowError) as exc:
            raise InvalidRequestError(f"{where}: data does not fit {datatype} ({exc})") from None
    if flat.size != count:
        raise InvalidRequestError(
            f"{where}: data has {flat.size} elements, shape {shape} needs {count}"
        )
    return flat.reshape(shape)


def _numbers_of(data, datatype: str, where: str) -> np.ndarray:
    """``data`` as numpy reads it. For a float tensor, integers beyond 64 bits (exact in
    ``json``'s lists, objects to numpy) become floats, as orjson and simdjson read them."""
    try:
        loose = np.asarray(data)
        if loose.dtype == object and datatype[:2] in ("FP", "BF") and all(
                type(value) in (int, float) for value in loose.flat):
            loose = np.asarray(data, dtype=np.float64)
    except (ValueError, TypeError):
        raise InvalidRequestError(f"{where}: data is not a rectangular list") from None
    except OverflowError as exc:  # beyond float64, which json's floats cannot be
        raise InvalidRequestError(f"{where}: data does not fit {datatype} ({exc})") from None
    return loose


def _check_json_kind(loose: np.ndarray, datatype: str, where: str) -> None:
    kind = loose.dtype.kind
    if loose.size == 0:
        return
    if kind not in "biuf":
        raise InvalidRequestError(f"{where}: data must hold numbers for {datatype}, "
                                  f"got {loose.dtype.name} values")
    if datatype == "BOOL" and kind != "b":
        raise InvalidRequestError(f"{where}: data must hold true/false for BOOL")
    if datatype[0] in "UI" and kind == "f":
        if not np.all(np.isfinite(loose)) or not np.all(np.equal(np.mod(loose, 1), 0)):
            raise InvalidRequestError(f"{where}: data must hold integers for {datatype}")
    if kind in "iuf" and datatype[0] in "UI":  # floats too: 1e30 or an integer beyond 64 bits
        info = np.iinfo(numpy_dtype(datatype, where))
        # a float is compared with max + 1, a power of two, exact as a float: 2.0**63 is
        # not <= int64's max, though the max rounds to it
        beyond = loose.max() >= info.max + 1 if kind == "f" else loose.max() > info.max
        if loose.min() < info.min or beyond:
            raise InvalidRequestError(f"{where}: data outside the range of {datatype}")


def _flatten_bytes(data, where: str) -> np.ndarray:
    items, stack = [], [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str):
            items.append(item.encode("utf-8"))
        else:
            raise InvalidRequestError(f"{where}: BYTES data must be strings")
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def encode_infer_response(response: InferenceResponse, wishes: dict) -> tuple[bytes, Optional[int]]:
    """Response body; the JSON header's length when binary outputs follow it."""
    outputs, blobs = [], []
    for name, array in response.outputs.items():
        datatype = response.datatypes.get(name) or datatype_of(array)
        entry = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        outputs.append(entry)
        if name in response.shared:  # its data is in shared memory; no parameters either, as
            continue                 # Triton's C++ client reads them as binary_data_size
        if wishes.get(name, wishes.get("*", False)):
            raw = array_to_raw(array)
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = json_data(array, datatype)
    body = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        body["id"] = response.id
    body["outputs"] = outputs
    header = dump_json(body)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)


def dump_json(value) -> bytes:
    """Compact JSON of ``value``, whose lists may be numpy arrays; strings that are not
    valid UTF-8 (a lone surrogate from a request ``id``) are escaped as ``json`` does."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":"), default=np.ndarray.tolist).encode()


def json_data(array: np.ndarray, datatype: str):
    """Flat row-major JSON list of ``array``: a list, or an array that orjson writes as one.

    Floats of every width are written as the shortest text of their float64 value (a
    float32 0.1 as 0.10000000149011612), read back exactly; NaN and infinities as the
    strings "nan", "inf" and "-inf"."""
    flat = array.reshape(-1)
    if datatype == "BYTES":
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in flat]
    if flat.dtype.kind == "f" or datatype in ("FP16", "BF16"):
        flat = flat.astype(np.float64, copy=False)
        if not np.isfinite(flat).all():
            return [v if math.isfinite(v) else str(v) for v in flat.tolist()]
    if flat.dtype.kind in "biuf" and flat.dtype.isnative:
        return np.ascontiguousarray(flat)
    return flat.tolist()
