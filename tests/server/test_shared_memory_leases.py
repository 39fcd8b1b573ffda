"""Shared-memory regions in use while clients unregister them: a request that reads or
writes a region holds a lease on its descriptor, so the number is never closed and reused
(for another client's object, or a socket) under it; I/O errors are a 400."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
from multiprocessing import shared_memory

import httpx
import numpy as np
import onnx
import pytest

from flowserve.server.errors import InvalidRequestError
from flowserve.server import shared_memory as shm
from flowserve.server.shared_memory import SharedMemoryRegistry, SharedTensor

from .conftest import running_server
from .test_large_bodies import WIDTH, doubler

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs POSIX shared memory")

SIZE = 4096


@pytest.fixture
def objects():
    """Makes shared-memory objects filled with one byte; removes them afterwards."""
    made = []

    def make(fill: bytes, size: int = SIZE) -> str:
        obj = shared_memory.SharedMemory(create=True, size=size)
        obj.buf[:size] = fill * size
        made.append(obj)
        return "/" + obj.name

    yield make
    for each in made:
        each.close()
        with contextlib.suppress(FileNotFoundError):
            each.unlink()


class Paused:
    """Replaces ``os.<name>`` as the registry calls it: the first call waits until
    ``proceed`` is set (after saying so with ``entered``), then does the real call."""

    def __init__(self, monkeypatch, name: str):
        self.entered, self.proceed, self.real = threading.Event(), threading.Event(), getattr(os, name)
        monkeypatch.setattr(shm, "os", _OsWith(name, self))

    def __call__(self, *args):
        if not self.entered.is_set():
            self.entered.set()
            assert self.proceed.wait(10)
        return self.real(*args)


class _OsWith:
    """``os`` with one function replaced (the registry module's view of it only)."""

    def __init__(self, name: str, function):
        self._name, self._function = name, function

    def __getattr__(self, name):
        return self._function if name == self._name else getattr(os, name)


def in_thread(function, *args) -> dict:
    """Starts ``function(*args)`` in a thread; the dict gets its ``result`` or ``error``."""
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = function(*args)
        except Exception as exc:  # reported to the test
            outcome["error"] = exc

    outcome["thread"] = threading.Thread(target=run, daemon=True)
    outcome["thread"].start()
    return outcome


@pytest.mark.parametrize("again", ["other name", "same name"])
def test_a_read_in_flight_keeps_reading_its_own_object(monkeypatch, objects, again):
    """The region is unregistered, and another object registered (under another name or
    the same one), while a read waits: the read still gets the first object's bytes."""
    registry = SharedMemoryRegistry(enabled=True)
    registry.register("a", objects(b"A"), 0, SIZE)
    paused = Paused(monkeypatch, "preadv")
    reading = in_thread(registry.read, SharedTensor("a", 0, SIZE), "input 'x'")
    assert paused.entered.wait(10)
    registry.unregister("a")
    registry.register("a" if again == "same name" else "b", objects(b"B"), 0, SIZE)
    paused.proceed.set()
    reading["thread"].join(10)
    assert "error" not in reading, reading.get("error")
    assert bytes(reading["result"]) == b"A" * SIZE
    registry.close()


def test_a_write_in_flight_never_lands_in_another_object(monkeypatch, objects):
    registry = SharedMemoryRegistry(enabled=True)
    registry.register("out", objects(b"\0"), 0, SIZE)
    paused = Paused(monkeypatch, "pwrite")
    writing = in_thread(registry.write, SharedTensor("out", 0, SIZE), b"W" * SIZE, "output 'y'")
    assert paused.entered.wait(10)
    registry.unregister()
    other = objects(b"B")
    registry.register("b", other, 0, SIZE)
    paused.proceed.set()
    writing["thread"].join(10)
    assert "error" not in writing, writing.get("error")
    assert bytes(registry.read(SharedTensor("b", 0, SIZE), "check")) == b"B" * SIZE
    registry.close()


def test_the_descriptor_closes_when_the_last_user_is_done(monkeypatch, objects):
    registry = SharedMemoryRegistry(enabled=True)
    registry.register("a", objects(b"A"), 0, SIZE)
    fd = registry.check(SharedTensor("a", 0, 1), "x").fd
    paused = Paused(monkeypatch, "preadv")
    reading = in_thread(registry.read, SharedTensor("a", 0, SIZE), "input 'x'")
    assert paused.entered.wait(10)
    registry.unregister("a")
    os.fstat(fd)  # still open: a read uses it
    paused.proceed.set()
    reading["thread"].join(10)
    with pytest.raises(OSError):
        os.fstat(fd)


def test_an_io_error_is_a_400_naming_the_region(monkeypatch, objects):
    registry = SharedMemoryRegistry(enabled=True)
    registry.register("a", objects(b"A"), 0, SIZE)

    def failing(*args):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(shm, "os", _OsWith("preadv", failing))
    with pytest.raises(InvalidRequestError, match=r"input 'x': reading region 'a' .* failed: "
                                                  r"Input/output error") as caught:
        registry.read(SharedTensor("a", 0, SIZE), "input 'x'")
    assert caught.value.status == 400
    monkeypatch.undo()
    registry.close()


def test_an_infer_reading_a_region_another_client_replaces(monkeypatch, objects, tmp_path):
    """End to end: an infer's input (over 1 MiB: read in a worker thread) is being read when
    another client unregisters the region and registers another object under its name; the
    answer is computed from the bytes that were registered when the infer began."""
    (tmp_path / "doubler" / "1").mkdir(parents=True)
    onnx.save(doubler(), tmp_path / "doubler" / "1" / "model.onnx")
    (tmp_path / "doubler" / "config.json").write_text(json.dumps({"max_batch_size": 16}))
    rows = 9
    size = rows * WIDTH * 4
    first, second = objects(b"\x01", size), objects(b"\x02", size)  # 0x01010101: a tiny float
    expected = 2 * np.frombuffer(b"\x01" * size, np.float32)
    body = {"inputs": [
        {"name": "tag", "datatype": "UINT8", "shape": [rows, 3], "data": [0] * (3 * rows)},
        {"name": "x", "datatype": "FP32", "shape": [rows, WIDTH],
         "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": size}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}
    with running_server(tmp_path, allow_client_shm=True, max_request_bytes=1 << 23) as server:
        with httpx.Client(base_url=server.http_url, timeout=20) as client:
            client.post("/v2/systemsharedmemory/region/in/register",
                        json={"key": first, "offset": 0, "byte_size": size}).raise_for_status()
            paused = Paused(monkeypatch, "preadv")
            answer = in_thread(lambda: httpx.post(f"{server.http_url}/v2/models/doubler/infer",
                                                  json=body, timeout=20))
            assert paused.entered.wait(10)
            client.post("/v2/systemsharedmemory/region/in/unregister").raise_for_status()
            client.post("/v2/systemsharedmemory/region/in/register",
                        json={"key": second, "offset": 0, "byte_size": size}).raise_for_status()
            paused.proceed.set()
            answer["thread"].join(20)
    response = answer["result"]
    assert response.status_code == 200, response.text[:300]
    length = int(response.headers["inference-header-content-length"])
    y = np.frombuffer(response.content[length:], np.float32)
    np.testing.assert_array_equal(y, expected)
