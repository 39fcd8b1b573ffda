"""Request bodies the HTTP clients write: JSON tensors read back exactly."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from flowserve.clients import rest
from flowserve.clients.tensors import json_list_text


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_float_json_text_reads_back_bit_exactly(dtype):
    rng = np.random.default_rng(0)
    values = rng.standard_normal(5000) * 10.0 ** rng.integers(-40, 39, 5000)
    with np.errstate(over="ignore"):
        array = values.astype(np.float32).astype(dtype)
    array = array[np.isfinite(array)]
    array[:4] = [0.0, -0.0, 1.0, -3.0]
    back = np.array(json.loads(json_list_text(array)), np.float64).astype(np.float32)
    assert back.astype(dtype).tobytes() == array.tobytes()


def test_non_finite_and_other_types_fall_back_to_plain_json():
    assert json_list_text(np.array([np.nan, np.inf, 1.5], np.float32)) == "[NaN,Infinity,1.5]"
    assert json_list_text(np.array([[1, 2]], np.int64)) == "[1,2]"
    assert json_list_text(np.array([True, False])) == "[true,false]"
    assert json_list_text(np.array([b"a", "b"], dtype=object)) == '["a","b"]'
    x = np.array([0.1, 0.2], np.float64)
    assert json.loads(json_list_text(x)) == [0.1, 0.2]


def test_json_request_body_carries_every_field():
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    body, headers = rest.encode_infer({"x": x}, ["y"], binary=False, request_id="r1",
                                      timeout_us=500)
    assert headers == {"Content-Type": "application/json"}
    assert json.loads(body) == {
        "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
                    "data": json.loads(json_list_text(x))}],
        "id": "r1", "parameters": {"timeout": 500},
        "outputs": [{"name": "y", "parameters": {"binary_data": False}}],
    }
    data = np.array(json.loads(body)["inputs"][0]["data"], np.float32).reshape(2, 3)
    assert data.tobytes() == x.tobytes()
