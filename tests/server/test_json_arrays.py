"""Long numeric ``data`` arrays, parsed by simdjson into numpy, give what ``json`` gives:
bit for bit, with ``NaN`` and ``Infinity``, nested, and with the same errors."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from flowserve.clients.tensors import json_list_text
from flowserve.server.datatypes import DecodeLimits
from flowserve.server.errors import InvalidRequestError, RequestTooLargeError
from flowserve.server.http.codec import decode_infer_request
from flowserve.server.http.json_arrays import (
    _INFINITY_MARK,
    _NAN_MARK,
    LIFT_BODY_BYTES,
    lift_numeric_arrays,
)

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


def _lifted_count(body: bytes) -> int:
    return len(lift_numeric_arrays(body)[1].arrays)


def _as_json_reads_it(body: bytes, dtype) -> np.ndarray:
    """The oracle: ``json.loads`` of the body, its data made an array by numpy."""
    return np.array(json.loads(body)["inputs"][0]["data"], dtype=np.float64).astype(dtype)


def _random_bits(dtype, count: int, seed: int) -> np.ndarray:
    """Every bit pattern of ``dtype`` alike: subnormals, extreme exponents, NaN, infinities."""
    width = np.dtype(dtype).itemsize
    bits = np.random.default_rng(seed).integers(0, 256, count * width, dtype=np.uint8)
    return bits.view(dtype)


@pytest.mark.parametrize("datatype, dtype", [("FP32", np.float32), ("FP64", np.float64),
                                             ("FP16", np.float16)])
@pytest.mark.parametrize("writer", ["json", "client"])
def test_random_bit_patterns_with_nan_and_infinity_decode_bit_for_bit(datatype, dtype, writer):
    values = _random_bits(dtype, 150_528 if dtype != np.float16 else 40_000, seed=6)
    values[:3] = [np.nan, np.inf, -np.inf]
    text = json.dumps(values.tolist()) if writer == "json" else json_list_text(values)
    body = ('{"inputs":[{"name":"x","datatype":"%s","shape":[%d],"data":%s}]}'
            % (datatype, values.size, text)).encode()
    assert b"NaN" in body and b"-Infinity" in body and _lifted_count(body) == 1
    decoded = decode_infer_request(body, None, "m")[0].inputs["x"]
    expected = _as_json_reads_it(body, dtype)
    assert decoded.dtype == dtype
    np.testing.assert_array_equal(decoded.view(f"u{np.dtype(dtype).itemsize}"),
                                  expected.view(f"u{np.dtype(dtype).itemsize}"))


HARD_FLOATS = [
    "2.2250738585072011e-308", "2.2250738585072012e-308", "1e-320", "4.9e-324", "5e-324",
    "2.4703282292062327e-324", "2.4703282292062328e-324", "1e-400", "-0.0", "-0", "0",
    "1.7976931348623157e308", "8.98846567431158e307", "1e22", "1e23", "9007199254740993",
    "9007199254740993.0", "0.1000000000000000055511151231257827021181583404541015625",
    "0.30000000000000004", "123456789012345678901234567890e-10",
    "1.00000000000000011102230246251565404236316680908203125",  # halfway: rounds to even
    "3.4028235677973366e38", "3.4028236e38", "1e39", "-1e39", "1.401298464324817e-45",
    "7.006492321624085e-46", "1E+2", "1e-7", "-12.5e-3", "0.0000000000000000001",
    "18446744073709551615", "-9223372036854775808", "9223372036854775807",
]


@pytest.mark.parametrize("dtype, datatype", [(np.float64, "FP64"), (np.float32, "FP32"),
                                             (np.float16, "FP16")])
def test_hard_decimals_round_as_python_rounds_them(dtype, datatype):
    """simdjson's decimals are correctly rounded, as Python's are: halfway cases, the
    subnormals, digits past 17, integers past 2^53 and values beyond float32's range."""
    text = "[" + ", ".join(HARD_FLOATS * 2000) + "]"
    body = ('{"inputs":[{"name":"x","datatype":"%s","shape":[%d],"data":%s}]}'
            % (datatype, 2000 * len(HARD_FLOATS), text)).encode()
    assert _lifted_count(body) == 1
    decoded = decode_infer_request(body, None, "m")[0].inputs["x"]
    expected = np.array([float(json.loads(v)) for v in HARD_FLOATS] * 2000).astype(dtype)
    unsigned = f"u{np.dtype(dtype).itemsize}"
    np.testing.assert_array_equal(decoded.view(unsigned), expected.view(unsigned))


@pytest.mark.parametrize("beyond", ["1.7976931348623159e308", "1e400", str(2**70)])
@pytest.mark.parametrize("rows", [ROWS, 1000])  # lifted or not, orjson reads the body or not
@pytest.mark.parametrize("nan", ["", ", NaN"])
def test_numbers_simdjson_refuses_are_read_by_json(beyond, rows, nan):
    """A float beyond float64 (json: infinity) or an integer beyond 64 bits (json: exact,
    a float to a float tensor) leaves its array in the JSON, which reads it as before."""
    text = "[" + ", ".join(["0.5"] * rows + [beyond]) + nan + "]"
    body = ('{"inputs":[{"name":"x","datatype":"FP64","shape":[%d],"data":%s}]}'
            % (rows + 1 + bool(nan), text)).encode()
    assert _lifted_count(body) == 0
    decoded = decode_infer_request(body, None, "m")[0].inputs["x"]
    np.testing.assert_array_equal(decoded, _as_json_reads_it(body, np.float64))


def test_marker_values_written_as_numbers_stay_what_they_are():
    """The values the literals are parsed as may be sent as numbers: with literals beside
    them the array is read by json; without, simdjson reads them as they are."""
    marks = [float(_NAN_MARK), float(_INFINITY_MARK), -float(_INFINITY_MARK)]
    for values in (marks * (ROWS // 3), marks * (ROWS // 3) + [float("nan"), float("inf")]):
        body = _body(values, "FP64")
        assert _lifted_count(body) == (0 if np.isnan(values[-1]) or np.isinf(values[-1]) else 1)
        decoded = decode_infer_request(body, None, "m")[0].inputs["x"]
        np.testing.assert_array_equal(decoded, np.array(values))


@pytest.mark.parametrize("bad", [b"NaNN", b"1NaN", b"NaN1", b"-NaN", b"Inf", b"Infinityy",
                                 b"-Infinity-Infinity", b"NaN NaN"])
def test_malformed_literals_are_malformed_json(bad):
    body = _body([0.5, float("nan")] * (ROWS // 2))
    assert _lifted_count(body) == 1
    with pytest.raises(InvalidRequestError, match="malformed JSON"):
        decode_infer_request(body.replace(b"NaN", bad, 1), None, "m")


def test_nested_data_is_lifted_and_read_row_major():
    values = np.random.default_rng(7).standard_normal((2, 3, 200, 100)).astype(np.float32)
    values[0, 1, 2, 3] = np.nan
    for text in (json.dumps(values.tolist()), json.dumps(values.tolist(), indent=1)):
        body = ('{"inputs":[{"name":"x","datatype":"FP32","shape":[2,3,200,100],"data":%s}]}'
                % text).encode()
        assert _lifted_count(body) == 1
        np.testing.assert_array_equal(decode_infer_request(body, None, "m")[0].inputs["x"],
                                      values)


def test_ragged_nesting_is_held_to_the_shape_element_count():
    """Nesting is not checked (as for flat data): the element count must match the shape."""
    rows = [[0.5] * 3] * (ROWS // 3 - 1) + [[0.5] * 2]
    with pytest.raises(InvalidRequestError, match=r"data has \d+ elements, shape"):
        decode_infer_request(_body(rows, shape=[ROWS // 3, 3]), None, "m")
    rows[-1] = [0.5] * 4
    request, _ = decode_infer_request(_body(rows, shape=[ROWS + 1]), None, "m")
    assert request.inputs["x"].shape == (ROWS + 1,)


@pytest.mark.parametrize("bad", [b"0.5] [0.5", b"0.5][0.5", b"0.5 [0.5", b"0.5] 0.5",
                                 b"0.5],, [0.5", b"0.5], [, 0.5"])
def test_arrays_of_arrays_without_commas_between_are_malformed(bad):
    body = _body([[0.5, 0.5]] * (ROWS // 2)).replace(b"0.5], [0.5", bad, 1)
    with pytest.raises(InvalidRequestError, match="malformed JSON"):
        decode_infer_request(body, None, "m")


@pytest.mark.parametrize("datatype, data, words", [
    ("INT32", [1] * ROWS + [1.5], "must hold integers"),
    ("INT8", [1] * ROWS + [300], "outside the range of INT8"),
    ("UINT32", [1] * ROWS + [-1], "outside the range of UINT32"),
    ("INT64", [1] * ROWS + [2**63], "outside the range of INT64"),  # json: a float64 2.0**63
    ("UINT64", [1.0] * ROWS + [2.0**64], "outside the range of UINT64"),
    ("BOOL", [1] * ROWS, "true/false"),
    ("FP32", [1] * ROWS, None),
    ("INT64", [-2**63, 2**63 - 1] * (ROWS // 2), None),
])
def test_integer_ranges_and_kinds_are_checked_as_before(datatype, data, words):
    body = _body(data, datatype)
    if words is None:
        assert _lifted_count(body) == 1
        decoded = decode_infer_request(body, None, "m")[0].inputs["x"]
        np.testing.assert_array_equal(decoded, np.array(data).astype(decoded.dtype))
        return
    with pytest.raises(InvalidRequestError, match=words):
        decode_infer_request(body, None, "m")


def test_bytes_data_stays_in_the_json():
    words = ["NaN", "1.5", "[1]"] * (ROWS // 30)
    body = _body(words, "BYTES")
    assert _lifted_count(body) == 0
    decoded = decode_infer_request(body, None, "m")[0].inputs["x"]
    assert decoded.tolist() == [w.encode() for w in words]


def test_a_mid_size_body_is_lifted_and_every_value_still_counts_for_the_limit():
    values = np.random.default_rng(8).standard_normal(5000).astype(np.float32)
    values[::500] = np.nan
    body = _body(values.tolist())
    assert len(body) < 1 << 20 and _lifted_count(body) == 1
    decoded = decode_infer_request(body, None, "m")[0].inputs["x"]
    np.testing.assert_array_equal(decoded, values)
    with pytest.raises(RequestTooLargeError, match="--max-json-elements"):
        decode_infer_request(body, None, "m", limits=DecodeLimits(max_json_elements=4000))
