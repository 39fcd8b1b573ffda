"""Hostile PyTorch checkpoints cost bounded work and memory (issue 25, item 11).

Each file is crafted here, its pickle written opcode by opcode (``pickletools`` names), and
loaded in one child process under an address-space limit and a timeout, with tracemalloc
counting what numpy and Python allocate: a loader that hangs, grows or lets a
RecursionError/MemoryError escape fails the test instead of the machine. Real
``torch.save`` files still load as ``torch.load`` reads them, views sharing memory.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import flowserve as flow
from flowserve.serialization.torch_checkpoint import CheckpointError, read_torch_checkpoint

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20

# -- a pickle, opcode by opcode --------------------------------------------------------


def _text(s: str) -> bytes:
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE


def _int(n: int) -> bytes:
    if -(2**31) <= n < 2**31:
        return b"J" + struct.pack("<i", n)  # BININT
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw  # LONG1


def _ints(values) -> bytes:
    return b"(" + b"".join(_int(v) for v in values) + b"t"  # MARK ... TUPLE


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _pid(key: str, numel: int, storage: str = "FloatStorage") -> bytes:
    return (b"(" + _text("storage") + _global("torch", storage) + _text(key) + _text("cpu") + _int(numel)
            + b"tQ")  # TUPLE, BINPERSID


def _tensor(pid: bytes, size, stride, offset: int = 0) -> bytes:
    return (_global("torch._utils", "_rebuild_tensor_v2") + b"(" + pid + _int(offset) + _ints(size)
            + _ints(stride) + b"\x89" + _global("collections", "OrderedDict") + b")R" + b"tR")


def _dict(pairs) -> bytes:
    return b"}(" + b"".join(_text(k) + v for k, v in pairs) + b"u"  # EMPTY_DICT MARK ... SETITEMS


def _pickle(body: bytes) -> bytes:
    return b"\x80\x02" + body + b"."


def _doubling_tuples(levels: int) -> bytes:
    """A memo graph: t[i+1] = (t[i], t[i]), whose unfolded size is 2**levels."""
    out = b"]q\x00"  # EMPTY_LIST BINPUT 0
    for i in range(levels):  # BINGET, TUPLE2 (of the top and the copy), BINPUT
        out += b"h" + bytes([i]) + b"\x86q" + bytes([i + 1])
    return out


def _write_pt(path: Path, pickle: bytes, storages: dict | None = None, compress: bool = False) -> Path:
    kind = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", kind) as zf:
        zf.writestr("archive/data.pkl", pickle)
        zf.writestr("archive/byteorder", "little")
        for key, data in (storages or {}).items():
            zf.writestr(f"archive/data/{key}", data)
    return path


def _zip_bomb(path: Path, nbytes: int) -> Path:
    """``nbytes`` of zeros deflated into a storage (~1000:1), with a tensor over all of it."""
    body = _dict([("w", _tensor(_pid("0", nbytes // 4), (nbytes // 4,), (1,)))])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("archive/data.pkl", _pickle(body))
        with zf.open("archive/data/0", "w", force_zip64=True) as member:
            chunk = bytes(MiB)
            for _ in range(nbytes // MiB):
                member.write(chunk)
    return path


def _storages(count: int) -> tuple[bytes, dict]:
    body = b"](" + b"".join(_tensor(_pid(str(i), 1), (1,), (1,)) for i in range(count)) + b"e"  # APPENDS
    return _pickle(body), {str(i): struct.pack("<f", i) for i in range(count)}


# -- the hostile files, and one bounded child that loads them --------------------------

HOSTILE = {  # name -> (what the error says, the most tracemalloc may see at peak)
    "stride_zero": ("larger than the limit", 4 * MiB),
    "size_2_63": ("larger than the limit", 4 * MiB),
    "size_2_63_empty": ("larger than the limit", 4 * MiB),
    "size_huge_dims": ("larger than the limit", 4 * MiB),
    "negative_stride": ("invalid tensor layout", 4 * MiB),
    "zip_bomb": ("past the limit", 4 * MiB),
    "pickle_bomb": ("past the limit", 100 * MiB),
    "deep_lists": ("nest more than 100 deep", 64 * MiB),
    "deep_pid": ("persistent id is a tuple", 64 * MiB),
    "cycle": ("contains itself", 4 * MiB),
    "long_global": ("names the global", 4 * MiB),
    "memo_graph_key": ("a dict key is a tuple", 4 * MiB),
    "memo_graph_pid": ("persistent id is a tuple", 4 * MiB),  # hung the old reader: last
}


def _build(name: str, d: Path) -> Path:
    path = d / f"{name}.pt"
    one = {"0": b"\x00" * 4}
    if name == "stride_zero":  # 517 bytes that were 1.6 GB
        return _write_pt(path, _pickle(_dict([("w", _tensor(_pid("0", 1), (400_000_000,), (0,)))])), one)
    if name == "size_2_63":
        return _write_pt(path, _pickle(_dict([("w", _tensor(_pid("0", 1), (2**63,), (0,)))])), one)
    if name == "size_2_63_empty":
        return _write_pt(path, _pickle(_dict([("w", _tensor(_pid("0", 1), (0, 2**63, 2**63), (0, 0, 0)))])), one)
    if name == "size_huge_dims":  # 64 dims of 2**2000: the error must not print them
        return _write_pt(path, _pickle(_dict([("w", _tensor(_pid("0", 1), (2**2000,) * 64, (0,) * 64))])), one)
    if name == "negative_stride":
        return _write_pt(path, _pickle(_dict([("w", _tensor(_pid("0", 1), (3,), (-1,), 2))])), one)
    if name == "zip_bomb":  # ~130 KB inflating to 128 MiB
        return _zip_bomb(path, 128 * MiB)
    if name == "pickle_bomb":  # 40 M empty lists (2.5 GB as objects), deflated to ~40 KB
        return _write_pt(path, _pickle(b"(" + b"]" * (40 * MiB) + b"l"), compress=True)
    if name == "deep_lists":
        return _write_pt(path, _pickle(b"]" * 100_000 + b"a" * 99_999))
    if name == "deep_pid":
        return _write_pt(path, _pickle(b")" + b"\x85" * 100_000 + b"Q"))
    if name == "cycle":
        return _write_pt(path, _pickle(b"]q\x00h\x00a"))
    if name == "long_global":
        return _write_pt(path, _pickle(_global("os" * 500_000, "system")))
    if name == "memo_graph_key":
        return _write_pt(path, _pickle(b"}" + _doubling_tuples(100) + b"Ns"))
    if name == "memo_graph_pid":
        return _write_pt(path, _pickle(_doubling_tuples(100) + b"Q"))
    raise AssertionError(name)


_CHILD = r"""
import json, resource, sys, time, tracemalloc
import flowserve as flow
vm = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
limit = vm + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
flow.load(sys.argv[2])  # the imports a first load makes are not the file's doing
for path in sys.argv[3:]:
    tracemalloc.start()
    start = time.process_time()
    try:
        flow.load(path)
        outcome = {"error": None, "message": ""}
    except BaseException as exc:
        outcome = {"error": type(exc).__name__, "message": str(exc)[:4000]}
    outcome["peak"] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    outcome["seconds"] = time.process_time() - start
    print(json.dumps({"path": path, **outcome}), flush=True)
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """name -> what loading it gave, each file loaded by one child with 1 GiB of address
    space to spare and 60 s in all (a file the child never reported hung or crashed it)."""
    d = tmp_path_factory.mktemp("hostile_pt")
    paths = {str(_build(name, d)): name for name in HOSTILE}
    torch.save({"w": torch.ones(3)}, d / "warm.pt")
    cmd = [sys.executable, "-c", _CHILD, str(1 << 30), str(d / "warm.pt"), *paths]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=60, cwd=REPO).stdout
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
    found = {}
    for line in out.decode().splitlines():
        record = json.loads(line)
        found[paths[record["path"]]] = record
    return found


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_checkpoint_is_one_bounded_checkpoint_error(outcomes, name):
    assert name in outcomes, f"{name}: the loader hung, or the child died, before it answered"
    record = outcomes[name]
    message, peak = HOSTILE[name]
    assert record["error"] == "CheckpointError", record
    assert "\n" not in record["message"] and len(record["message"]) < 400, record["message"][:400]
    assert __import__("re").search(message, record["message"]), record["message"]
    assert record["peak"] < peak, f"{name}: {record['peak'] / MiB:.1f} MiB at peak"


def test_file_sizes_are_what_the_issue_measured(tmp_path):
    assert (_build("stride_zero", tmp_path)).stat().st_size < 600
    assert (_build("memo_graph_pid", tmp_path)).stat().st_size < 1000
    assert (_build("zip_bomb", tmp_path)).stat().st_size < 1 * MiB


def test_one_storage_referenced_a_hundred_times_is_read_once(tmp_path):
    import tracemalloc

    n = MiB // 4
    body = b"](" + b"".join(_tensor(_pid("0", n), (n,), (1,)) for _ in range(100)) + b"e"
    path = _write_pt(tmp_path / "shared.pt", _pickle(body), {"0": np.arange(n, dtype=np.float32).tobytes()})
    tracemalloc.start()
    try:
        got = flow.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(got) == 100 and all(np.shares_memory(t.numpy(), got[0].numpy()) for t in got)
    assert peak < 4 * MiB, f"{peak / MiB:.1f} MiB at peak for one 1 MiB storage"  # was 100 copies


def test_max_bytes_is_the_budget(tmp_path):
    torch.save({"w": torch.zeros(1024)}, tmp_path / "w.pt")
    assert read_torch_checkpoint(tmp_path / "w.pt", max_bytes=8192)["w"].shape == (1024,)
    with pytest.raises(CheckpointError, match=r"storage 0 .* past the limit of 4000 \(max_bytes\)"):
        read_torch_checkpoint(tmp_path / "w.pt", max_bytes=4000)
    with pytest.raises(CheckpointError, match="past the limit"):
        flow.load(tmp_path / "w.pt", max_bytes=4000)


def test_many_storages_load_in_linear_time(tmp_path, monkeypatch):
    """The archive's member list is built once, however many storages: the old reader
    scanned ``namelist()`` for each storage, quadratic in their number (20k storages took
    6.2 s). Counted, not timed, so a loaded machine cannot fail it."""
    listings = {"count": 0}
    original = zipfile.ZipFile.namelist

    def counted(self):
        listings["count"] += 1
        return original(self)

    monkeypatch.setattr(zipfile.ZipFile, "namelist", counted)
    pickle, storages = _storages(2000)
    got = flow.load(_write_pt(tmp_path / "n2000.pt", pickle, storages))
    assert [float(t.numpy()[0]) for t in got[:3]] == [0.0, 1.0, 2.0] and len(got) == 2000
    assert listings["count"] <= 2, listings


def _compare_with_torch(path: Path) -> None:
    ref, got = torch.load(path, weights_only=True), flow.load(path)
    assert list(got) == list(ref)
    for key, t in ref.items():
        np.testing.assert_array_equal(got[key].float().numpy(), t.float().numpy(), err_msg=key)
        assert got[key].shape == tuple(t.shape), key
        strides = zip(t.shape, got[key].numpy().strides, t.stride())  # the same layout as torch's tensor
        assert all(mine == theirs * t.element_size() for n, mine, theirs in strides if n > 1), key


def test_torch_save_views_load_as_views_sharing_memory(tmp_path):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    objects = {"base": base, "t": base.t(), "row": base[2], "cols": base[:, 1:4], "expanded": base[0, :1].expand(5, 3),
               "bf16": torch.arange(6).bfloat16(), "tied": base}
    torch.save(objects, tmp_path / "views.pt")
    _compare_with_torch(tmp_path / "views.pt")
    got = flow.load(tmp_path / "views.pt")
    assert all(np.shares_memory(got[k].numpy(), got["base"].numpy()) for k in ("t", "row", "cols", "expanded", "tied"))
    got["base"].numpy()[2, 0] = -1.0  # as in torch: one storage, so the views see the write
    assert got["row"].numpy()[0] == -1.0 and got["t"].numpy()[0, 2] == -1.0


def test_big_endian_checkpoint_loads_as_torch_reads_it(tmp_path):
    objects = {"f": torch.randn(3, 4), "d": torch.randn(5).double(), "l": torch.arange(4), "h": torch.randn(3).half(),
               "bf": torch.randn(3).bfloat16(), "b": torch.tensor([True, False])}
    torch.save(objects, tmp_path / "little.pt")
    with zipfile.ZipFile(tmp_path / "little.pt") as src, zipfile.ZipFile(tmp_path / "big.pt", "w") as dst:
        itemsizes = {str(i): t.element_size() for i, t in enumerate(objects.values())}
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("/byteorder"):
                data = b"big"
            elif "/data/" in item.filename:
                data = np.frombuffer(data, f"<u{itemsizes[item.filename.rsplit('/', 1)[1]]}").byteswap().tobytes()
            dst.writestr(item, data)
    got = flow.load(tmp_path / "big.pt")
    for key, t in objects.items():
        np.testing.assert_array_equal(got[key].float().numpy(), t.float().numpy(), err_msg=key)


def test_a_damaged_storage_is_one_line(tmp_path):
    torch.save({"w": torch.arange(12, dtype=torch.float32)}, tmp_path / "ok.pt")
    raw = bytearray((tmp_path / "ok.pt").read_bytes())
    at = raw.index(np.arange(12, dtype=np.float32).tobytes())
    raw[at + 5] ^= 0xFF  # the stored storage's bytes no longer match the zip's CRC
    (tmp_path / "crc.pt").write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="storage 0 is damaged") as info:
        flow.load(tmp_path / "crc.pt")
    assert "\n" not in str(info.value)
