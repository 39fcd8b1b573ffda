"""Hostile safetensors files cost bounded memory (issue 25, item 12): flowserve's own BF16
reader checks offsets as the safetensors library does, a structure record that names one
tensor many times gets that tensor, not copies, and deep nesting is one SavedGraphError."""

from __future__ import annotations

import json
import struct
import tracemalloc

import numpy as np
import pytest
from safetensors.numpy import load as st_load

import flowserve as flow
from flowserve.errors import SavedGraphError
from flowserve.format.tensors import read_tensors, write_tensors

MiB = 1 << 20


def _safetensors(entries: dict, body: bytes) -> bytes:
    """A file with this header (name -> (dtype, shape, [begin, end])) and data, written by hand."""
    header = {name: {"dtype": d, "shape": list(s), "data_offsets": list(o)} for name, (d, s, o) in entries.items()}
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def _peak(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _refused(path, match: str) -> str:
    with pytest.raises(SavedGraphError, match=match) as info:
        flow.load(path)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message[:400]
    return message


def test_overlapping_offsets_are_refused_before_any_copy(tmp_path):
    """100 BF16 tensors over the same 1 MiB were 100 MiB of copies (8 MB -> 3.2 GB)."""
    n = MiB // 2
    entries = {f"t{i}": ("BF16", (n,), (0, MiB)) for i in range(100)}
    (tmp_path / "overlap.safetensors").write_bytes(_safetensors(entries, bytes(MiB)))
    _, peak = _peak(lambda: _refused(tmp_path / "overlap.safetensors", "contiguous and must not overlap"))
    assert peak < 8 * MiB, f"{peak / MiB:.1f} MiB at peak"


BAD_HEADERS = {  # what the safetensors library refuses too, for F32 and for BF16 alike
    "gap": ({"a": ("F32", (2,), (0, 8)), "b": ("F32", (2,), (12, 20))}, 20, "starts at byte 12, not at 8"),
    "overlap": ({"a": ("F32", (2,), (0, 8)), "b": ("F32", (2,), (4, 12))}, 12, "starts at byte 4, not at 8"),
    "past_end": ({"a": ("F32", (4,), (0, 16))}, 8, "past the data's 8"),
    "wrong_size": ({"a": ("F32", (3,), (0, 8))}, 8, "do not hold"),
    "trailing": ({"a": ("F32", (2,), (0, 8))}, 12, "hold 8 bytes of the data's 12"),
    "reversed": ({"a": ("F32", (0,), (8, 0))}, 8, "end before they begin"),
    "float_shape": ({"a": ("F32", (2.0,), (0, 8))}, 8, "expected dtype, shape"),
    "huge_shape": ({"a": ("F32", (2**64, 2**64), (0, 8))}, 8, "do not hold"),
}


@pytest.mark.parametrize("case", list(BAD_HEADERS))
@pytest.mark.parametrize("dtype", ["F32", "BF16"])
def test_offsets_are_checked_as_the_safetensors_library_checks_them(tmp_path, case, dtype):
    entries, size, match = BAD_HEADERS[case]
    entries = {k: ("BF16", tuple(s * 2 for s in shape), o) if dtype == "BF16" else (d, shape, o)
               for k, (d, shape, o) in entries.items()}
    raw = _safetensors(entries, bytes(size))
    if dtype == "F32" and case != "float_shape":
        with pytest.raises(Exception):  # the library agrees the file is malformed
            st_load(raw)
    (tmp_path / "bad.safetensors").write_bytes(raw)
    _refused(tmp_path / "bad.safetensors", match if dtype == "BF16" else "not a valid safetensors file")


def test_bf16_files_from_other_tools_still_load(tmp_path):
    a, b = np.arange(6, dtype=np.float32), np.arange(4, dtype=np.uint16)
    raw = _safetensors({"b": ("BF16", (2, 2), (24, 32)), "a": ("F32", (6,), (0, 24))}, a.tobytes() + b.tobytes())
    (tmp_path / "ok.safetensors").write_bytes(raw)
    got = flow.load(tmp_path / "ok.safetensors")
    np.testing.assert_array_equal(got["a"].numpy(), a)
    assert got["b"].dtype is flow.bfloat16 and got["b"].shape == (2, 2)
    np.testing.assert_array_equal(got["b"].numpy().view(np.uint16).ravel(), b)


def test_a_repeated_reference_is_one_tensor_not_a_copy_each(tmp_path):
    """20k references to one 4 KiB tensor were 80 MiB of copies (4 MB -> 1.26 GB)."""
    structure = json.dumps([{"__tensor__": "x"}] * 20_000).encode()
    write_tensors(tmp_path / "refs.pt", {"x": np.ones(1024, np.float32),
                                         "flowserve.structure": np.frombuffer(structure, np.uint8)})
    got, peak = _peak(lambda: flow.load(tmp_path / "refs.pt"))
    assert len(got) == 20_000 and all(t is got[0] for t in got)
    assert peak < 16 * MiB, f"{peak / MiB:.1f} MiB at peak"


@pytest.mark.parametrize("depth", [150, 100_000])
def test_deep_structure_is_one_saved_graph_error(tmp_path, depth):
    structure = ("[" * depth + "]" * depth).encode()
    write_tensors(tmp_path / "deep.pt", {"flowserve.structure": np.frombuffer(structure, np.uint8)})
    _refused(tmp_path / "deep.pt", "nests more than 100 deep|damaged structure record")
    (tmp_path / "deep_dir").mkdir()
    write_tensors(tmp_path / "deep_dir" / "state.safetensors", {})
    (tmp_path / "deep_dir" / "state.json").write_bytes(structure)
    _refused(tmp_path / "deep_dir", "nests more than 100 deep|not valid JSON")


def test_errors_do_not_echo_what_the_file_holds(tmp_path):
    name = "n" * MiB + "\nforged log line"
    raw = _safetensors({name: ("BF16", (3,), (0, 8))}, bytes(8))
    (tmp_path / "long.safetensors").write_bytes(raw)
    _refused(tmp_path / "long.safetensors", "do not hold")
    structure = json.dumps({"__tensor__": "k" * MiB}).encode()
    write_tensors(tmp_path / "missing.pt", {"flowserve.structure": np.frombuffer(structure, np.uint8)})
    _refused(tmp_path / "missing.pt", "is missing from the tensor file")


def test_nested_state_round_trips(tmp_path):
    w = flow.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    state = {"model": {"w": w, "tied": w}, "steps": [1, (2, 3)], "arr": np.ones(2), "dtype": flow.bfloat16}
    flow.save(state, tmp_path / "state.pt")
    flow.save(state, tmp_path / "state_dir")
    for path in (tmp_path / "state.pt", tmp_path / "state_dir"):
        got = flow.load(path)
        np.testing.assert_array_equal(got["model"]["w"].numpy(), w.numpy())
        assert got["steps"] == [1, (2, 3)] and got["dtype"] is flow.bfloat16
    assert read_tensors(tmp_path / "state_dir" / "state.safetensors").keys() == {"model.w", "model.tied", "arr"}


def test_deep_header_is_one_saved_graph_error(tmp_path):
    raw = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    (tmp_path / "deep.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    _refused(tmp_path / "deep.safetensors", "not a valid safetensors file")
