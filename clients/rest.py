"""Open Inference Protocol REST bodies for the HTTP clients (sync and asyncio).

``encode_infer`` makes the body and headers of ``POST .../infer``: the binary
tensor extension by default, plain JSON when ``binary=False``;
``decode_infer`` turns the answer back into numpy arrays::

    body, headers = encode_infer({"x": x}, outputs=None, binary=True)
    outputs = decode_infer(status, response_headers, response_body)
"""

from __future__ import annotations

import json
from typing import Optional
from urllib.parse import quote

import numpy as np

from flowserve.protocol.tensors import raw_view

from .errors import InferenceServerError, ProtocolError
from .tensors import array_from_json, array_from_raw, datatype_of, json_list_text, loads

HEADER_LENGTH = "Inference-Header-Content-Length"


def model_path(model: str, version: str = "", suffix: str = "") -> str:
    """``/v2/models/{model}[/versions/{version}]{suffix}`` with names URL-quoted."""
    path = f"/v2/models/{quote(model, safe='')}"
    if version:
        path += f"/versions/{quote(str(version), safe='')}"
    return path + suffix


def encode_infer(inputs: dict, outputs: Optional[list] = None, binary: bool = True,
                 request_id: str = "", timeout_us: Optional[int] = None) -> tuple[bytes, dict]:
    """Body and headers of an infer request for ``{name: array}`` inputs."""
    parts, headers = encode_infer_parts(inputs, outputs, binary, request_id, timeout_us)
    return b"".join(parts), headers


def encode_infer_parts(inputs: dict, outputs: Optional[list] = None, binary: bool = True,
                       request_id: str = "", timeout_us: Optional[int] = None) -> tuple[list, dict]:
    """``encode_infer``'s body as parts: the JSON, then each binary tensor's bytes, a view of
    the array's memory where it is contiguous (no copy; the array must not change until the
    request is sent)."""
    tensors, blobs = [], []
    for name, value in inputs.items():
        array = np.asarray(value)
        entry = {"name": name, "shape": list(array.shape), "datatype": datatype_of(array)}
        if binary:
            raw = raw_view(array)
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
            tensors.append(_compact(entry))
        else:  # the data list is written by json_list_text, spliced into the object
            tensors.append(_compact(entry)[:-1] + ',"data":' + json_list_text(array) + "}")
    header: dict = {}
    if request_id:
        header["id"] = request_id
    parameters = {"binary_data_output": True} if binary else {}
    if timeout_us:
        parameters["timeout"] = int(timeout_us)
    if parameters:
        header["parameters"] = parameters
    if outputs:
        header["outputs"] = [{"name": n, "parameters": {"binary_data": binary}} for n in outputs]
    rest = "," + _compact(header)[1:-1] if header else ""
    text = ('{"inputs":[' + ",".join(tensors) + "]" + rest + "}").encode()
    headers = {"Content-Type": "application/json"}
    if not blobs:
        return [text], headers
    headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(text))}
    return [text, *blobs], headers


def _compact(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"))


def check_status(status: int, body: bytes) -> None:
    """Raise ``InferenceServerError`` with the server's message for a non-2xx answer."""
    if 200 <= status < 300:
        return
    try:
        message = json.loads(body).get("error") or body.decode(errors="replace")
    except (ValueError, AttributeError):
        message = body.decode(errors="replace") or f"HTTP {status}"
    raise InferenceServerError(message, status)


def decode_json(status: int, body: bytes):
    """The JSON value of a successful answer."""
    check_status(status, body)
    try:
        return json.loads(body)
    except ValueError as exc:
        raise ProtocolError(f"the server answered invalid JSON ({exc})") from None


def decode_infer(status: int, header_length: Optional[str], body: bytes) -> dict:
    """``{output name: array}`` from an infer answer."""
    check_status(status, body)
    view = memoryview(body)
    split = int(header_length) if header_length is not None else len(body)
    try:
        header = loads(bytes(view[:split]))
    except ValueError as exc:
        raise ProtocolError(f"the server answered invalid JSON ({exc})") from None
    results, offset = {}, split
    for output in header.get("outputs", []):
        name, datatype, shape = output["name"], output["datatype"], output["shape"]
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            results[name] = array_from_raw(view[offset : offset + size], datatype, shape)
            offset += size
        else:
            results[name] = array_from_json(output["data"], datatype, shape)
    return results
