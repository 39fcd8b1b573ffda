"""The Open Inference Protocol's tensors on their own (``flowserve.protocol``): datatype
names and raw bytes as tritonclient, the protocol's reference client, writes and reads
them, and every malformed input one error of the caller's class naming the tensor."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tritonclient.utils as triton

from flowserve.protocol.datatypes import DATATYPE_BY_NUMPY, NUMPY_BY_DATATYPE, TRITON_TYPE_BY_DATATYPE
from flowserve.protocol.tensors import MAX_DIMS, TensorCodec, array_to_raw, raw_view

CODEC = TensorCodec(ValueError, subject="input 'x'")
NUMERIC = [d for d in NUMPY_BY_DATATYPE if d not in ("BYTES", "BF16")]  # tritonclient maps BF16 to float32


@pytest.mark.parametrize("datatype", NUMERIC)
def test_numeric_datatypes_name_the_dtypes_tritonclient_names(datatype):
    dtype = NUMPY_BY_DATATYPE[datatype]
    assert np.dtype(triton.triton_to_np_dtype(datatype)) == dtype
    assert triton.np_to_triton_dtype(dtype) == datatype == DATATYPE_BY_NUMPY[dtype]
    assert TRITON_TYPE_BY_DATATYPE[datatype] == "TYPE_" + datatype


@pytest.mark.parametrize("datatype", [*NUMERIC, "BF16"])
def test_raw_bytes_round_trip_as_little_endian_row_major(datatype):
    dtype = NUMPY_BY_DATATYPE[datatype]
    array = (np.arange(12) % 2 if datatype == "BOOL" else np.arange(12)).astype(dtype).reshape(3, 4).T
    raw = array_to_raw(array)  # a transposed view: written in row-major order of its shape
    assert raw == np.ascontiguousarray(array).astype(dtype.newbyteorder("<")).tobytes()
    back = CODEC.array_from_raw(raw, datatype, [4, 3])
    assert back.dtype == dtype and np.array_equal(back, array)
    assert bytes(raw_view(np.ascontiguousarray(array))) == raw


def test_bf16_is_ml_dtypes_bfloat16_bits():
    values = np.array([1.0, -2.5, 3.140625], ml_dtypes.bfloat16)
    raw = array_to_raw(values)
    assert raw == values.view(np.uint16).astype("<u2").tobytes()
    assert CODEC.array_from_raw(raw, "BF16", [3]).tolist() == values.tolist()


def test_bytes_tensors_are_length_prefixed_as_tritonclient_serializes_them():
    items = np.array([[b"ab", b""], ["caf\u00e9", b"\x00\xff"]], dtype=object)
    expected = triton.serialize_byte_tensor(np.array([[b"ab", b""], ["caf\u00e9".encode(), b"\x00\xff"]],
                                                     dtype=object)).item()
    raw = array_to_raw(items)
    assert raw == bytes(expected)
    back = CODEC.array_from_raw(raw, "BYTES", [2, 2])
    assert back.dtype == object and back.tolist() == [[b"ab", b""], ["caf\u00e9".encode(), b"\x00\xff"]]
    assert list(triton.deserialize_bytes_tensor(raw)) == list(back.reshape(-1))


def test_decoding_shares_aligned_memory_and_copies_unaligned():
    buffer = bytearray(np.arange(5, dtype=np.float32).tobytes() + b"\x00")
    aligned = CODEC.array_from_raw(memoryview(buffer)[:16], "FP32", [4])
    assert np.shares_memory(aligned, np.frombuffer(buffer, np.uint8))
    unaligned = CODEC.array_from_raw(memoryview(bytes(1) + bytes(buffer))[1:17], "FP32", [4])
    assert unaligned.flags.aligned and unaligned.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("raw,datatype,shape,message", [
    (bytes(12), "FP32", [4], "got 12 bytes of data, expected 16 for shape [4] of FP32"),
    (bytes(4), "FLOAT", [1], "unknown datatype 'FLOAT'; expected one of BOOL"),
    (bytes(4), "FP32", [-1], "shape [-1] must be a list of non-negative integers"),
    (bytes(4), "FP32", [1.0], "must be a list of non-negative integers"),
    (bytes(4), "FP32", [True], "must be a list of non-negative integers"),
    (bytes(4), "FP32", [1] * (MAX_DIMS + 1), f"shape has {MAX_DIMS + 1} dims, at most {MAX_DIMS}"),
    (b"\x05\x00\x00\x00ab", "BYTES", [1], "BYTES element runs past the end of the data"),
    (b"\x01\x00", "BYTES", [1], "BYTES data ends inside a length prefix"),
    (b"\x00\x00\x00\x00" * 3, "BYTES", [2], "more than 2 BYTES elements in the data"),
    (b"\x00\x00\x00\x00", "BYTES", [2], "got 1 BYTES elements, expected 2"),
])
def test_malformed_tensors_are_one_error_naming_the_tensor(raw, datatype, shape, message):
    with pytest.raises(ValueError) as caught:
        CODEC.array_from_raw(raw, datatype, shape)
    assert str(caught.value).startswith("input 'x': ") and message in str(caught.value)


def test_a_bytes_element_limit_is_checked_before_parsing():
    codec = TensorCodec(KeyError, limit_hint=" (--max-bytes-elements)")
    with pytest.raises(KeyError, match=r"input: 3 BYTES elements exceed the limit of 2 \(--max-bytes-elements\)"):
        codec.array_from_raw(b"", "BYTES", [3], max_bytes_elements=2)


def test_arrays_without_a_protocol_datatype_are_refused():
    with pytest.raises(ValueError, match="arrays of dtype complex64 have no protocol datatype"):
        CODEC.datatype_of(np.zeros(2, np.complex64))
    assert CODEC.datatype_of(np.array(["a"])) == "BYTES" == CODEC.datatype_of(np.array([b"a"]))
