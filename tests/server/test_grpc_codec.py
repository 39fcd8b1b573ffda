"""``split_raw_inputs``: a request's blobs taken out of its bytes as views, the rest parsed by
protobuf, giving what protobuf's parse of the whole message gives."""

from __future__ import annotations

import numpy as np
import pytest

from flowserve.protocol import protos
from flowserve.server.errors import InvalidRequestError
from flowserve.server.grpc.codec import decode_infer_request, split_raw_inputs


def _request(**fields) -> protos.ModelInferRequest:
    message = protos.ModelInferRequest(**fields)
    for name, array in (("x", np.arange(12, dtype=np.float32).reshape(3, 4)),
                        ("z", np.arange(6, dtype=np.int64).reshape(3, 2))):
        tensor = message.inputs.add(name=name, datatype="FP32" if array.dtype == np.float32 else "INT64")
        tensor.shape.extend(array.shape)
        message.raw_input_contents.append(array.tobytes())
    return message


def _unknown_fields() -> bytes:
    """Fields numbered 10-12 and 300 (none a field of the message) of each plain wire type:
    a varint, a fixed64, a fixed32 and bytes (a two-byte key)."""
    return (bytes([10 << 3 | 0, 0x96, 0x01]) + bytes([11 << 3 | 1]) + b"\x01" * 8
            + bytes([12 << 3 | 5]) + b"\x02" * 4
            + bytes([(300 << 3 | 2) & 0x7F | 0x80, (300 << 3 | 2) >> 7]) + b"\x03abc")


def _same_as_protobuf(raw: bytes) -> list:
    """Checks that the split gives protobuf's parse of ``raw``; the blobs."""
    rest, blobs = split_raw_inputs(raw)
    whole = protos.ModelInferRequest.FromString(raw)
    assert [bytes(b) for b in blobs] == list(whole.raw_input_contents)
    del whole.raw_input_contents[:]
    parsed = protos.ModelInferRequest.FromString(rest)
    assert parsed.SerializeToString(deterministic=True) == whole.SerializeToString(deterministic=True)
    return blobs


def test_blobs_come_out_as_views_of_the_message_bytes():
    raw = _request(model_name="m", id="r1").SerializeToString()
    blobs = _same_as_protobuf(raw)
    assert [len(b) for b in blobs] == [48, 48]
    assert all(isinstance(b, memoryview) and b.obj is raw for b in blobs)


def test_blobs_between_other_fields_and_unknown_fields_keep_their_order():
    # concatenated messages merge (repeated fields append, a scalar's last value wins), so
    # blobs end up between other fields, as any writer may place them
    first = _request(model_name="first", id="a").SerializeToString()
    second = protos.ModelInferRequest(model_name="second")
    second.raw_input_contents.append(b"\x07" * 8)
    second.parameters["timeout"].int64_param = 5
    raw = first + _unknown_fields() + second.SerializeToString() + _unknown_fields()
    blobs = _same_as_protobuf(raw)
    assert [len(b) for b in blobs] == [48, 48, 8]
    rest, _ = split_raw_inputs(raw)
    assert protos.ModelInferRequest.FromString(rest).model_name == "second"


def test_a_message_without_blobs_is_returned_as_it_is():
    message = protos.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    raw = message.SerializeToString()
    assert split_raw_inputs(raw) == (raw, [])
    assert split_raw_inputs(b"") == (b"", [])


@pytest.mark.parametrize("raw", [
    _request(model_name="m").SerializeToString()[:-5],  # the last blob cut short
    b"\x0a\x05abc",  # a string field longer than the message
    b"\x08",  # a varint field without its value
    b"\x08" + b"\xff" * 11,  # a varint longer than 10 bytes
    b"\x0b\x0c",  # a group (wire type 3), which this does not walk
    b"\x02\x00",  # field number 0
    b"\x0e" + b"\x00" * 8,  # wire type 6 does not exist
    b"\x09\x00\x00",  # a fixed64 cut short
])
def test_what_it_does_not_read_is_left_to_protobuf(raw):
    assert split_raw_inputs(raw) is None


def test_decoded_request_matches_protobufs_parse():
    raw = _request(model_name="m", id="r1").SerializeToString()
    rest, blobs = split_raw_inputs(raw)
    split = decode_infer_request(protos.ModelInferRequest.FromString(rest), blobs=blobs)
    whole = decode_infer_request(protos.ModelInferRequest.FromString(raw))
    assert (split.model_name, split.id) == (whole.model_name, whole.id) == ("m", "r1")
    for name in ("x", "z"):
        np.testing.assert_array_equal(split.inputs[name], whole.inputs[name])
        assert split.inputs[name].dtype == whole.inputs[name].dtype


def test_blob_count_is_checked_on_the_split_blobs():
    message = _request(model_name="m")
    message.raw_input_contents.append(b"")
    rest, blobs = split_raw_inputs(message.SerializeToString())
    with pytest.raises(InvalidRequestError, match="3 blobs for 2 inputs"):
        decode_infer_request(protos.ModelInferRequest.FromString(rest), blobs=blobs)
