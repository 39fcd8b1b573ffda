"""JSON tensors through orjson: values exactly as ``json`` gave them, limits and 400s kept."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from flowserve.clients.tensors import json_list_text
from flowserve.server.dataplane import InferenceResponse
from flowserve.server.datatypes import DecodeLimits
from flowserve.server.errors import InvalidRequestError, RequestTooLargeError
from flowserve.server.http.codec import decode_infer_request, encode_infer_response
from flowserve.server.http.json_arrays import LIFT_BODY_BYTES, lift_numeric_arrays


def hard_float32(count: int, seed: int = 0) -> np.ndarray:
    """Random float32 bit patterns (subnormals, huge and tiny exponents) plus the edges."""
    bits = np.random.default_rng(seed).integers(0, 2**32, count, dtype=np.uint64)
    values = bits.astype(np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38, 3.4028235e38,
                      -3.4028235e38, 0.1, 1 / 3, 16777217.0], np.float32)
    return np.concatenate([edges, values[np.isfinite(values)]])


def _body(text: str, count: int, datatype: str = "FP32") -> bytes:
    return ('{"inputs":[{"name":"x","datatype":"%s","shape":[%d],"data":%s}]}'
            % (datatype, count, text)).encode()


def _old_json_data(array: np.ndarray) -> list:
    """What the encoder wrote before orjson: ``tolist`` of the float32s widened to float64."""
    values = array.reshape(-1).astype(np.float32).tolist()
    return [v if np.isfinite(v) else str(v) for v in values]


def _decoded(body: bytes) -> np.ndarray:
    return decode_infer_request(body, None, "m")[0].inputs["x"]


@pytest.mark.parametrize("count", [300, 200_000])  # the whole body by orjson; lifted arrays
@pytest.mark.parametrize("writer", ["client", "json"])
def test_float32_requests_decode_bit_for_bit(count, writer):
    x = hard_float32(count)
    text = json_list_text(x) if writer == "client" else json.dumps(x.tolist())
    body = _body(text, x.size)
    assert (len(body) > LIFT_BODY_BYTES) == (count > 300)
    np.testing.assert_array_equal(_decoded(body).view(np.uint32), x.view(np.uint32))


@pytest.mark.parametrize("count", [1000, 200_000])
def test_float32_responses_read_back_bit_for_bit_and_as_before(count):
    x = hard_float32(count, seed=1).reshape(-1, 1)
    body, length = encode_infer_response(InferenceResponse("m", "1", {"y": x}), {})
    data = json.loads(body)["outputs"][0]["data"]
    assert length is None and all(type(v) is float for v in data[:100])
    assert np.array_equal(np.array(data).view(np.uint64),
                          np.array(_old_json_data(x)).view(np.uint64))  # same float64s
    np.testing.assert_array_equal(np.array(data, np.float32).view(np.uint32),
                                  x.reshape(-1).view(np.uint32))


@pytest.mark.parametrize("array, datatype, expected", [
    (np.array([1.5, np.nan, np.inf, -np.inf], np.float32), "FP32", [1.5, "nan", "inf", "-inf"]),
    (np.array([0.1, 2], np.float16), "FP16", [float(np.float16(0.1)), 2.0]),
    (np.array([0.1, 2], ml_dtypes.bfloat16), "BF16", [float(ml_dtypes.bfloat16(0.1)), 2.0]),
    (np.array([-2**63, 2**63 - 1]), "INT64", [-2**63, 2**63 - 1]),
    (np.array([2**64 - 1], np.uint64), "UINT64", [2**64 - 1]),
    (np.array([True, False]), "BOOL", [True, False]),
    (np.array([b"a", "\u00e9".encode()], object), "BYTES", ["a", "\u00e9"]),
    (np.arange(6, dtype=np.int8).reshape(2, 3)[:, ::2], "INT8", [0, 2, 3, 5]),
])
def test_each_datatype_is_written_as_before(array, datatype, expected):
    response = InferenceResponse("m", "1", {"y": array}, id="r", datatypes={"y": datatype})
    body, _ = encode_infer_response(response, {})
    output = json.loads(body)["outputs"][0]
    assert output["data"] == expected and [type(v) for v in output["data"]] == [
        type(v) for v in expected]
    assert output["shape"] == list(array.shape) and output["datatype"] == datatype


def test_an_id_json_accepts_but_orjson_cannot_write_is_escaped_as_before():
    request, _ = decode_infer_request(b'{"id":"\\ud800","inputs":[]}', None, "m")
    response = InferenceResponse("m", "1", {"y": np.ones(2, np.float32)}, id=request.id)
    body, _ = encode_infer_response(response, {})
    assert b'"id":"\\ud800"' in body and json.loads(body)["outputs"][0]["data"] == [1.0, 1.0]


@pytest.mark.parametrize("text, expected", [
    ("[NaN, Infinity, -Infinity]", [np.nan, np.inf, -np.inf]),  # json's literals, as before
    ("[1e400, -1e400]", [np.inf, -np.inf]),
    ("[ 1 , 2.5 ]", [1.0, 2.5]),
])
def test_what_orjson_refuses_json_still_accepts(text, expected):
    np.testing.assert_array_equal(_decoded(_body(text, len(expected))), expected)


@pytest.mark.parametrize("body, words", [
    (b'{"inputs": [1,,2]}', "line 1 column 15"),
    (b'{"inputs": [', "line 1 column 13"),
    (b'{"inputs": "\xff"}', "malformed JSON"),
    (b'{"inputs": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
])
def test_malformed_bodies_are_400s_naming_where(body, words):
    with pytest.raises(InvalidRequestError, match="malformed JSON") as error:
        decode_infer_request(body, None, "m")
    assert words in str(error.value)


@pytest.mark.parametrize("bad", [b"0.5 0.5", b"0.5.5", b"05", b"0.5,]"])
def test_malformed_numbers_in_a_lifted_array_are_400s(bad):
    body = _body(json_list_text(np.full(300_000, 0.5, np.float32)), 300_000)
    body = body.replace(b"0.5,0.5", bad, 1)
    with pytest.raises(InvalidRequestError, match="malformed JSON"):
        decode_infer_request(body, None, "m")


def test_the_element_limit_holds_for_bodies_orjson_parses():
    body = _body(json_list_text(np.ones(1000, np.float32)), 1000)
    limits = DecodeLimits(max_json_elements=999)
    with pytest.raises(RequestTooLargeError, match="--max-json-elements"):
        decode_infer_request(body, None, "m", limits=limits)
    assert _decoded(body).size == 1000


@pytest.mark.parametrize("text, datatype", [
    ("[%d]" % 2**70, "INT64"),  # orjson reads it as a float; still out of range
    ("[1e30]", "INT32"),
    ("[-1e19]", "INT64"),
    ("[1.5]", "INT8"),
])
def test_integer_types_refuse_floats_out_of_range_or_fractional(text, datatype):
    with pytest.raises(InvalidRequestError, match="input 'x'"):
        _decoded(_body(text, 1, datatype))


def test_lifted_integers_stay_exact_integers():
    values = np.random.default_rng(3).integers(-2**62, 2**62, 200_000)
    body = _body(json.dumps(values.tolist()), values.size, "INT64")
    assert len(lift_numeric_arrays(body)[1].arrays) == 1
    np.testing.assert_array_equal(_decoded(body), values)
