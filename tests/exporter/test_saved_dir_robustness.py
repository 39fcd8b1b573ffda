"""Mutated saved directories: every case is one clear flowserve error naming the file and
the problem; nothing executes code, writes outside the directory, or crashes."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import struct

import numpy as np
import pytest

import flowserve as flow
from flowserve.errors import FlowserveError, SavedGraphError
from flowserve.exporter import export
from flowserve.format import manifest as manifest_module
from flowserve.format.tensors import write_tensors
from tests.exporter.helpers import called_graph, mlp

MARKER = "flowserve-robustness-pwned"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pristine") / "mlp"
    flow.save(called_graph(mlp(), 2, 6), directory)
    return directory


@pytest.fixture
def saved(pristine, tmp_path):
    target = tmp_path / "box" / "mlp"
    shutil.copytree(pristine, target)
    return target


def _manifest(d):
    return json.loads((d / "flowserve.json").read_text())


def _write_manifest(d, m):
    (d / "flowserve.json").write_text(json.dumps(m))


def _rehash(d):
    """Recompute the checksums, as an attacker (or a careless tool) would."""
    m = _manifest(d)
    m["files"] = {name: hashlib.sha256((d / name).read_bytes()).hexdigest() for name in m["files"]}
    _write_manifest(d, m)


def _edit_graph(d, edit):
    doc = json.loads((d / "graph.json").read_text())
    edit(doc["inference"])
    (d / "graph.json").write_text(json.dumps(doc))
    _rehash(d)


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


def truncate_params(d):
    data = (d / "params.safetensors").read_bytes()
    (d / "params.safetensors").write_bytes(data[: len(data) // 2])


def truncate_params_rehashed(d):
    truncate_params(d)
    _rehash(d)


def flip_byte_in_graph(d):
    data = bytearray((d / "graph.json").read_bytes())
    data[len(data) // 2] ^= 0x01
    (d / "graph.json").write_bytes(bytes(data))


def flip_byte_in_params(d):
    data = bytearray((d / "params.safetensors").read_bytes())
    data[-3] ^= 0x80
    (d / "params.safetensors").write_bytes(bytes(data))


def missing_params(d):
    (d / "params.safetensors").unlink()


def missing_graph(d):
    (d / "graph.json").unlink()


def missing_manifest(d):
    (d / "flowserve.json").unlink()


def bad_json_manifest(d):
    (d / "flowserve.json").write_text('{"format_version": 1,')


def manifest_not_object(d):
    (d / "flowserve.json").write_text("[1, 2, 3]")


def manifest_not_utf8(d):
    (d / "flowserve.json").write_bytes(b"\xff\xfe{\x00}")


def bad_json_graph(d):
    (d / "graph.json").write_text("{nope")
    _rehash(d)


def deeply_nested_graph(d):
    (d / "graph.json").write_text("[" * 200_000 + "]" * 200_000)
    _rehash(d)


def unknown_op(d):
    _edit_graph(d, lambda ir: ir["nodes"][0].update(op="os.system"))


def undefined_value(d):
    _edit_graph(d, lambda ir: ir["nodes"][1]["inputs"].__setitem__(0, "nowhere"))


def wrong_dtype_tensor(d):
    from flowserve.format.tensors import read_tensors

    arrays = read_tensors(d / "params.safetensors")
    arrays["model.0.weight"] = arrays["model.0.weight"].astype(np.float64)
    write_tensors(d / "params.safetensors", arrays)
    _rehash(d)


def wrong_dtype_in_manifest(d):
    m = _manifest(d)
    m["inputs"][0]["dtype"] = "complex128"
    _write_manifest(d, m)


def signature_dtype_mismatch(d):
    m = _manifest(d)
    m["inputs"][0]["dtype"] = "int64"
    _write_manifest(d, m)


def tensor_name_traversal(d):
    from flowserve.format.tensors import read_tensors

    arrays = read_tensors(d / "params.safetensors")
    arrays["../../evil"] = arrays.pop("model.0.weight")
    write_tensors(d / "params.safetensors", arrays)

    def rename(ir):
        ir["state"]["../../evil"] = dict(ir["state"].pop("model.0.weight"), name="../../evil")
        for node in ir["nodes"]:
            node["inputs"] = ["../../evil" if i == "model.0.weight" else i for i in node["inputs"]]
        for v in ir["values"]:
            if v["name"] == "model.0.weight":
                v["name"] = "../../evil"

    _edit_graph(d, rename)


def file_entry_traversal(d):
    m = _manifest(d)
    m["files"]["../../outside.json"] = m["files"].pop("graph.json")
    _write_manifest(d, m)


def newer_format(d):
    m = _manifest(d)
    m["format_version"] = manifest_module.FORMAT_VERSION + 1
    m["flowserve_version"] = "99.0.0"
    m["some_future_field"] = {"x": 1}
    _write_manifest(d, m)


def _set_input_shape(d, shape):
    m = _manifest(d)
    m["inputs"][0]["shape"] = shape
    _write_manifest(d, m)


def negative_dims(d):
    _set_input_shape(d, [-7, 6])


def pickle_as_params(d):
    (d / "params.safetensors").write_bytes(pickle.dumps(_Evil()))
    _rehash(d)


def huge_safetensors_header(d):
    (d / "params.safetensors").write_bytes(struct.pack("<Q", 2**62) + b"{}")
    _rehash(d)


def _link_outside(d, name):
    """Replace ``d/name`` by a link to an identical copy outside ``d``."""
    outside = d.parent / f"outside-{name}"
    shutil.copy(d / name, outside)
    (d / name).unlink()
    (d / name).symlink_to(outside)


def params_symlink_outside(d):
    _link_outside(d, "params.safetensors")


def params_is_directory(d):
    (d / "params.safetensors").unlink()
    (d / "params.safetensors").mkdir()


def empty_manifest(d):
    (d / "flowserve.json").write_text("")


def op_as_list(d):
    _edit_graph(d, lambda ir: ir["nodes"][0].update(op=["permute"]))


def node_input_as_list(d):
    _edit_graph(d, lambda ir: ir["nodes"][1]["inputs"].__setitem__(0, ["x"]))


def missing_attr(d):
    _edit_graph(d, lambda ir: ir["nodes"][0].update(attrs={}))


def huge_perm(d):
    _edit_graph(d, lambda ir: ir["nodes"][0].update(attrs={"perm": [1e30, 0]}))


def attrs_not_object(d):
    _edit_graph(d, lambda ir: ir["nodes"][0].update(attrs=[1, 0]))


def dtypes_metadata_not_json(d):
    from safetensors.numpy import save as st_save
    from flowserve.format.tensors import read_tensors

    arrays = read_tensors(d / "params.safetensors")
    data = st_save(arrays, metadata={"flowserve.dtypes": "{not json"})
    (d / "params.safetensors").write_bytes(data)
    _rehash(d)


def huge_manifest_dim(d):
    _set_input_shape(d, [-1, 100_000_000_000])


def manifest_shape_differs_from_graph(d):
    _set_input_shape(d, [-1, 13000])


def manifest_symlink_outside(d):
    _link_outside(d, "flowserve.json")


CASES = {
    truncate_params: ("params.safetensors", "checksum"),
    truncate_params_rehashed: ("params.safetensors", "safetensors"),
    flip_byte_in_graph: ("graph.json", "checksum"),
    flip_byte_in_params: ("params.safetensors", "checksum"),
    missing_params: ("params.safetensors", "missing"),
    missing_graph: ("graph.json", "missing"),
    missing_manifest: ("flowserve.json", "saved graph"),
    bad_json_manifest: ("flowserve.json", "not valid JSON"),
    manifest_not_object: ("flowserve.json", "JSON object"),
    manifest_not_utf8: ("flowserve.json", "not valid JSON"),
    bad_json_graph: ("graph.json", "not a flowserve graph"),
    deeply_nested_graph: ("graph.json", "nested"),
    unknown_op: ("graph.json", "unknown op 'os.system'"),
    undefined_value: ("graph.json", "undefined value 'nowhere'"),
    wrong_dtype_tensor: ("params.safetensors", "float64"),
    wrong_dtype_in_manifest: ("flowserve.json", "dtype"),
    signature_dtype_mismatch: ("flowserve.json", "int64"),
    tensor_name_traversal: ("graph.json", "../../evil"),
    file_entry_traversal: ("flowserve.json", "files"),
    newer_format: ("flowserve.json", f"format version {manifest_module.FORMAT_VERSION + 1}"),
    negative_dims: ("flowserve.json", "shape"),
    pickle_as_params: ("params.safetensors", "safetensors"),
    huge_safetensors_header: ("params.safetensors", "safetensors"),
    params_symlink_outside: ("params.safetensors", "outside"),
    params_is_directory: ("params.safetensors", "missing"),
    empty_manifest: ("flowserve.json", "not valid JSON"),
    op_as_list: ("graph.json", "nodes[0].op"),
    node_input_as_list: ("graph.json", "nodes[1].inputs"),
    missing_attr: ("graph.json", "node 0 (permute)"),
    huge_perm: ("graph.json", "node 0 (permute)"),
    attrs_not_object: ("graph.json", "nodes[0].attrs"),
    dtypes_metadata_not_json: ("params.safetensors", "flowserve.dtypes"),
    huge_manifest_dim: ("flowserve.json", "shape"),
    manifest_shape_differs_from_graph: ("flowserve.json", "13000"),
    manifest_symlink_outside: ("flowserve.json", "outside"),
}


@pytest.mark.parametrize("mutate", list(CASES), ids=[f.__name__ for f in CASES])
def test_mutated_directory_gives_one_clear_error(saved, mutate, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mutate(saved)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    file_name, problem = CASES[mutate]
    for load in (flow.load, lambda d: export(d, check=False)):
        with pytest.raises(SavedGraphError) as info:
            load(saved)
        message = str(info.value)
        assert file_name in message and problem in message, message
        assert "\n" not in message and len(message) < 600
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
    assert not (tmp_path / MARKER).exists()


def test_newer_format_names_both_versions(saved):
    newer_format(saved)
    with pytest.raises(SavedGraphError) as info:
        flow.load(saved)
    message = str(info.value)
    current = manifest_module.FORMAT_VERSION
    assert f"format version {current + 1}" in message and f"up to {current}" in message and "99.0.0" in message


def test_older_format_versions_still_load(saved, monkeypatch):
    monkeypatch.setattr(manifest_module, "FORMAT_VERSION", manifest_module.FORMAT_VERSION + 1)
    graph = flow.load(saved)
    assert graph(np.ones((2, 6), np.float32)).shape == (2, 3)


def test_pristine_copy_loads(saved):
    graph = flow.load(saved)
    assert graph(np.ones((2, 6), np.float32)).shape == (2, 3)


def test_errors_are_flowserve_errors():
    assert issubclass(SavedGraphError, FlowserveError)
