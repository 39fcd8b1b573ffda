"""Large JSON bodies: numeric ``data`` arrays parsed by numpy give what ``json`` gives."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from flowserve.server.errors import InvalidRequestError
from flowserve.server.http.codec import decode_infer_request
from flowserve.server.http.json_arrays import LIFT_BODY_BYTES, lift_numeric_arrays

ROWS = 300_000  # a body of a few MB: large enough to be lifted


def _body(data, datatype="FP32", shape=None, **extra) -> bytes:
    shape = shape or list(np.shape(data))
    return json.dumps({"id": "r", **extra, "inputs": [
        {"name": "x", "datatype": datatype, "shape": shape, "data": data}]}).encode()


@pytest.mark.parametrize("datatype, values", [
    ("FP32", np.random.default_rng(0).standard_normal((ROWS // 3, 3)).tolist()),
    ("FP64", (np.random.default_rng(1).standard_normal(ROWS) * 1e300).tolist()),
    ("INT64", np.random.default_rng(2).integers(-2**62, 2**62, ROWS).tolist()),
    ("UINT8", np.random.default_rng(3).integers(0, 256, ROWS).tolist()),
    ("INT32", [[int(v)] for v in np.random.default_rng(4).integers(-2**31, 2**31, ROWS)]),
])
def test_lifted_arrays_decode_exactly_as_json_does(datatype, values):
    body = _body(values, datatype)
    assert len(body) > LIFT_BODY_BYTES and len(lift_numeric_arrays(body)[1].arrays) == 1
    request, _ = decode_infer_request(body, None, "m")
    expected = np.array(values, dtype=request.inputs["x"].dtype)
    np.testing.assert_array_equal(request.inputs["x"], expected)
    assert request.id == "r"


@pytest.mark.parametrize("data", [
    [2**63 + 5] * ROWS,  # beyond int64: json's exact integers decide
    [True, False] * (ROWS // 2),  # not numbers
])
def test_arrays_numpy_cannot_be_sure_of_stay_in_the_json(data):
    body = _body(data, "UINT64" if isinstance(data[0], int) and not isinstance(data[0], bool)
                 else "BOOL")
    assert lift_numeric_arrays(body)[1].arrays == []
    request, _ = decode_infer_request(body, None, "m")
    assert request.inputs["x"].tolist() == data


def test_malformed_numbers_are_still_malformed_json():
    body = _body([0.5] * ROWS).replace(b"0.5, 0.5", b"0.5,, 0.5", 1)
    with pytest.raises(InvalidRequestError, match="malformed JSON"):
        decode_infer_request(body, None, "m")
    unbalanced = _body([0.5] * ROWS).replace(b"]}]}", b"]]}]}")
    with pytest.raises(InvalidRequestError, match="malformed JSON"):
        decode_infer_request(unbalanced, None, "m")


@pytest.mark.parametrize("specials", [["nan"], ["nan", "inf", "-inf"]])
def test_nan_and_infinity_literals_are_lifted_and_read_as_json_reads_them(specials):
    values = np.random.default_rng(5).standard_normal(ROWS).tolist()
    for i in range(0, ROWS, 997):  # json.dumps writes NaN, Infinity, -Infinity
        values[i] = float(specials[i // 997 % len(specials)])
    body = _body(values)
    assert b"NaN" in body and len(lift_numeric_arrays(body)[1].arrays) == 1
    request, _ = decode_infer_request(body, None, "m")
    np.testing.assert_array_equal(request.inputs["x"], np.array(values, dtype=np.float32))


def test_a_small_body_with_nan_is_read_as_json_reads_it():
    values = [0.5, float("nan"), -2.0, float("inf")] * 196
    body = _body([values], shape=[1, len(values)], id="NaN stays text")
    request, _ = decode_infer_request(body, None, "m")
    np.testing.assert_array_equal(request.inputs["x"], np.array([values], dtype=np.float32))
    assert request.id == "NaN stays text"


def test_a_small_malformed_body_with_nan_is_refused_where_it_is_malformed():
    body = _body([0.5, float("nan")] * 100).replace(b"]}]}", b"]}]", 1)
    with pytest.raises(InvalidRequestError, match=rf"char {len(body)}\)"):
        decode_infer_request(body, None, "m")


def test_a_float_past_the_first_chunk_makes_the_whole_array_float():
    data = [3] * ROWS + [0.5]  # the integers' chunks come first; the float is in the last
    request, _ = decode_infer_request(_body(data, "FP64"), None, "m")
    np.testing.assert_array_equal(request.inputs["x"], np.array(data))


def test_brackets_out_of_place_inside_a_lifted_array_are_malformed():
    body = _body([[0.5, 0.5]] * (ROWS // 2)).replace(b"0.5], [0.5", b"0.5, [0.5", 1)
    with pytest.raises(InvalidRequestError, match="malformed JSON"):
        decode_infer_request(body, None, "m")


def test_a_data_key_inside_a_string_is_left_alone():
    text = 'say "data": [' + "1, " * 40_000 + '1] ' + " " * LIFT_BODY_BYTES  # long: liftable
    body = _body([0.25] * ROWS, id=text)
    request, _ = decode_infer_request(body, None, "m")
    assert request.id == text
    assert request.inputs["x"].shape == (ROWS,)


def test_a_large_numeric_body_costs_a_small_multiple_of_its_size():
    body = _body([0.5] * (15 * 2**20 // 5))  # 15 MB of "0.5, "
    tracemalloc.start()
    try:
        decode_infer_request(body, None, "m")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(body), f"{peak / len(body):.1f}x the body"
