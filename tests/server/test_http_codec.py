"""The REST codec on its own: repeated binary headers decode like new ones."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flowserve.server.errors import InvalidRequestError
from flowserve.server.http.codec import decode_infer_request


def binary_body(arrays: dict, **header_fields) -> tuple[bytes, str]:
    inputs = [{"name": name, "shape": list(a.shape), "datatype": datatype,
               "parameters": {"binary_data_size": len(raw)}}
              for name, (a, datatype, raw) in arrays.items()]
    header = json.dumps({"inputs": inputs, **header_fields}).encode()
    return header + b"".join(raw for _, _, raw in arrays.values()), str(len(header))


def test_a_repeated_header_gives_each_body_its_own_arrays():
    decoded = []
    for value in (1.0, 2.0, 3.0):
        x = np.full((2, 3), value, np.float32)
        body, length = binary_body({"x": (x, "FP32", x.tobytes())}, id="same",
                                   outputs=[{"name": "y", "parameters": {"binary_data": True}}],
                                   parameters={"timeout": 250})
        request, wishes = decode_infer_request(body, length, "m", "2")
        decoded.append(request)
        np.testing.assert_array_equal(request.inputs["x"], x)
        assert (request.model_name, request.model_version) == ("m", "2")
        assert (request.outputs, request.id, request.timeout_s) == (["y"], "same", 250e-6)
        assert wishes == {"*": False, "y": True}
    assert decoded[0].inputs["x"][0, 0] == 1.0  # not overwritten by later bodies


def test_a_repeated_header_is_still_checked_against_its_body():
    x = np.ones((1, 2), np.float32)
    body, length = binary_body({"x": (x, "FP32", x.tobytes())})
    decode_infer_request(body, length, "m")
    with pytest.raises(InvalidRequestError, match="not claimed"):
        decode_infer_request(body + b"\0\0\0\0", length, "m")
    with pytest.raises(InvalidRequestError, match="runs past the end"):
        decode_infer_request(body[:-4], length, "m")


def test_bytes_contents_are_checked_on_every_request():
    good = b"\x02\x00\x00\x00ab"
    bad = b"\x09\x00\x00\x00ab"  # a length running past the data, same byte count
    words = np.array([b"ab"], dtype=object)
    body, length = binary_body({"w": (words, "BYTES", good)})
    assert decode_infer_request(body, length, "m")[0].inputs["w"].tolist() == [b"ab"]
    with pytest.raises(InvalidRequestError, match="runs past the end of the data"):
        decode_infer_request(body[: -len(bad)] + bad, length, "m")
