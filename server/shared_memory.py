"""Triton's system shared-memory extension: tensors that travel through POSIX shared memory
instead of the request and answer bodies.

A client on the same machine creates a shared-memory object (``shm_open``, which Linux
keeps as ``/dev/shm/<key>``), registers a region of it with the server under a name
(``register``), and then names the region in an input's or requested output's parameters
(``shared_memory_region``, ``shared_memory_byte_size``, optional ``shared_memory_offset``):
the server reads that input from the region and writes that output into it. Off unless the
server is started with ``--allow-client-shm`` (Triton's option): a registered region lets a
client read and overwrite a shared-memory object of the server's user.

The server never maps a client's object: it reads inputs with ``pread`` and writes outputs
with ``pwrite`` on the descriptor it opened at registration, and checks the object's size
before each, so a client that shrinks or removes its object gets an error, never a
``SIGBUS``. A request reading or writing a region holds a lease on it: ``unregister``
forgets the name at once, but the descriptor stays open until the last lease ends, so its
number is never reused under a request still using it. Keys name objects under
``/dev/shm`` only (one path component, no links)::

    registry = SharedMemoryRegistry(enabled=True)
    registry.register("input0", "/my_shm", offset=0, byte_size=4096)
    tensor = shared_tensor({"shared_memory_region": "input0",
                            "shared_memory_byte_size": 64}, "input 'x'")
    raw = registry.read(tensor, "input 'x'")
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import stat
import threading
from typing import Iterator, Mapping, Optional

from .errors import InvalidRequestError, ServerError

SHM_ROOT = "/dev/shm"
MAX_REGIONS = 1024
_KEY = re.compile(r"/?([A-Za-z0-9_.-]{1,255})")
PARAMETERS = ("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size")


class SharedMemoryDisabledError(ServerError):
    """A shared-memory request reached a server started without ``--allow-client-shm``."""

    status = 403


@dataclasses.dataclass(frozen=True)
class SharedTensor:
    """Where a tensor's bytes lie: ``byte_size`` bytes at ``offset`` into region ``region``."""

    region: str
    offset: int
    byte_size: int


@dataclasses.dataclass(frozen=True)
class SharedInput:
    """An input whose data is in shared memory; the data plane reads it before the run."""

    tensor: SharedTensor
    datatype: str
    shape: list


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def shared_tensor(params: Mapping, where: str) -> Optional[SharedTensor]:
    """The shared-memory place a tensor's parameters name, or None when they name none.
    ``shared_memory_byte_size`` is required with a region, and neither it nor the offset
    may come without one (as Triton checks)."""
    region = params.get("shared_memory_region")
    if region is None:
        given = [p for p in PARAMETERS[1:] if params.get(p) is not None]
        if given:
            raise InvalidRequestError(f"{where}: parameters.{given[0]} given without "
                                      "shared_memory_region")
        return None
    if not isinstance(region, str) or not region:
        raise InvalidRequestError(f"{where}: parameters.shared_memory_region: expected a region "
                                  f"name (a string), got {region!r:.40}")
    size, offset = params.get("shared_memory_byte_size"), params.get("shared_memory_offset", 0)
    if not _is_count(size):
        raise InvalidRequestError(f"{where}: parameters.shared_memory_byte_size: expected a byte "
                                  "count (a non-negative integer) with shared_memory_region, "
                                  f"got {size!r:.40}")
    if not _is_count(offset):
        raise InvalidRequestError(f"{where}: parameters.shared_memory_offset: expected a byte "
                                  f"offset (a non-negative integer), got {offset!r:.40}")
    return SharedTensor(region, offset, size)


@dataclasses.dataclass
class Region:
    """A registered region: ``byte_size`` bytes at ``offset`` into the object ``key``;
    ``users`` requests hold a lease on its descriptor, closed once it is unregistered and
    the last of them is done."""

    name: str
    key: str
    offset: int
    byte_size: int
    fd: int
    users: int = 0
    registered: bool = True

    def status(self) -> dict:
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}


class SharedMemoryRegistry:
    """The regions clients have registered, by name; ``enabled`` is ``--allow-client-shm``."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()  # regions are used from worker threads too

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise SharedMemoryDisabledError(
                "system shared memory: refused; start the server with --allow-client-shm to let "
                "clients on this machine pass tensors through shared memory")

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Open the object ``key`` and keep ``[offset, offset + byte_size)`` of it as ``name``."""
        self._check_enabled()
        where = f"system shared memory region {name!r:.80}"
        if not isinstance(name, str) or not name:
            raise InvalidRequestError("system shared memory: a region needs a name")
        if name in self._regions:
            raise InvalidRequestError(f"{where}: already registered (unregister it first)")
        if len(self._regions) >= MAX_REGIONS:
            raise InvalidRequestError(f"{where}: {MAX_REGIONS} regions are registered already, "
                                      "the most this server keeps; unregister some first")
        match = _KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None or match.group(1) in (".", ".."):
            raise InvalidRequestError(
                f"{where}: key {key!r:.80} is not a shared-memory object name: expected one name "
                "of letters, digits, '.', '_' or '-' (an optional leading '/'), as shm_open takes")
        if not (_is_count(offset) and _is_count(byte_size)):
            raise InvalidRequestError(f"{where}: offset and byte_size: expected non-negative "
                                      f"integers, got {offset!r:.40} and {byte_size!r:.40}")
        path = os.path.join(SHM_ROOT, match.group(1))
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise InvalidRequestError(f"{where}: cannot open the shared-memory object {key!r} "
                                      f"({exc.strerror}); create it first (shm_open) and give "
                                      "the server's user read and write access") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidRequestError(f"{where}: {key!r} is not a shared-memory object")
            if offset + byte_size > info.st_size:
                raise InvalidRequestError(
                    f"{where}: offset {offset} + byte_size {byte_size} runs past the end of "
                    f"{key!r} ({info.st_size} bytes)")
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            if name in self._regions:  # registered meanwhile by another request
                os.close(fd)
                raise InvalidRequestError(f"{where}: already registered (unregister it first)")
            self._regions[name] = Region(name, key, offset, byte_size, fd)

    def unregister(self, name: str = "") -> None:
        """Forget region ``name`` (every region when ``name`` is empty); a name that is not
        registered is no error, as in Triton. A region still in use by a request keeps its
        descriptor until that request is done."""
        self._check_enabled()
        with self._lock:
            names = [name] if name else list(self._regions)
            for each in names:
                region = self._regions.pop(each, None)
                if region is not None:
                    self._retire(region)

    def _retire(self, region: Region) -> None:
        """Mark ``region`` unregistered; close its descriptor when no lease holds it (under
        ``_lock``)."""
        region.registered = False
        if region.users == 0:
            os.close(region.fd)

    @contextlib.contextmanager
    def _lease(self, name: str, where: str) -> Iterator[Region]:
        """Region ``name``, its descriptor kept open until the ``with`` block ends."""
        with self._lock:
            region = self._region(name, where)
            region.users += 1
        try:
            yield region
        finally:
            with self._lock:
                region.users -= 1
                if not region.registered and region.users == 0:
                    os.close(region.fd)

    def status(self, name: str = "") -> list[dict]:
        """Every region (or region ``name``) as ``{name, key, offset, byte_size}``."""
        self._check_enabled()
        if name:
            return [self._region(name, "system shared memory").status()]
        return [region.status() for region in self._regions.values()]

    def cuda_status(self, name: str = "") -> list[dict]:
        """CUDA shared-memory regions: none is ever registered (``cuda_register``), so the
        list is empty and a named region is unknown."""
        self._check_enabled()
        if name:
            raise InvalidRequestError(f"cuda shared memory: no CUDA shared memory region "
                                      f"{name!r:.80} is registered")
        return []

    def cuda_register(self, name: str) -> None:
        """Refused: flowserve reads and writes tensors in system shared memory only."""
        self._check_enabled()
        raise InvalidRequestError(
            f"cuda shared memory region {name!r:.80}: refused; flowserve takes tensors in system "
            "shared memory only (tritonclient's register_system_shared_memory, perf_analyzer "
            "--shared-memory system), not CUDA IPC handles")

    def cuda_unregister(self, name: str = "") -> None:
        """Nothing to forget: no CUDA region is ever registered (so no error, as in Triton)."""
        self._check_enabled()

    def close(self) -> None:
        """Release every region (at shutdown; those in use when their request is done)."""
        with self._lock:
            for region in self._regions.values():
                self._retire(region)
            self._regions.clear()

    def _region(self, name: str, where: str) -> Region:
        region = self._regions.get(name)
        if region is None:
            raise InvalidRequestError(f"{where}: no system shared memory region {name!r:.80} is "
                                      "registered")
        return region

    def check(self, tensor: SharedTensor, where: str) -> Region:
        """The region ``tensor`` lies in, after checking that it lies within it."""
        self._check_enabled()
        region = self._region(tensor.region, where)
        self._check_fits(region, tensor, where)
        return region

    @staticmethod
    def _check_fits(region: Region, tensor: SharedTensor, where: str) -> None:
        if tensor.offset + tensor.byte_size > region.byte_size:
            raise InvalidRequestError(
                f"{where}: shared_memory_offset {tensor.offset} + shared_memory_byte_size "
                f"{tensor.byte_size} runs past the end of region {region.name!r} "
                f"({region.byte_size} bytes)")

    @contextlib.contextmanager
    def _using(self, tensor: SharedTensor, where: str, doing: str) -> Iterator[Region]:
        """A lease on the region ``tensor`` lies in, checked; an ``OSError`` while the
        block reads or writes it is a 400 naming the region and the object."""
        self._check_enabled()
        with self._lease(tensor.region, where) as region:
            self._check_fits(region, tensor, where)
            try:
                yield region
            except OSError as exc:
                raise InvalidRequestError(
                    f"{where}: {doing} region {region.name!r} (object {region.key!r}) failed: "
                    f"{exc.strerror or exc}") from None

    def _position(self, region: Region, tensor: SharedTensor, where: str, size: int) -> int:
        """The object offset of ``tensor``'s bytes, after checking that the object still
        holds ``size`` bytes there (a client may have shrunk it since registering)."""
        start = region.offset + tensor.offset
        current = os.fstat(region.fd).st_size
        if start + size > current:
            raise InvalidRequestError(f"{where}: the object {region.key!r} of region "
                                      f"{region.name!r} now holds {current} bytes, too few for "
                                      f"{size} bytes at {start}")
        return start

    def read(self, tensor: SharedTensor, where: str) -> bytearray:
        """The ``byte_size`` bytes ``tensor`` names."""
        with self._using(tensor, where, "reading") as region:
            start = self._position(region, tensor, where, tensor.byte_size)
            data = bytearray(tensor.byte_size)
            done = 0
            view = memoryview(data)
            while done < len(data):
                count = os.preadv(region.fd, [view[done:]], start + done)
                if count == 0:
                    raise InvalidRequestError(f"{where}: the object {region.key!r} ended while "
                                              "its data was read")
                done += count
        return data

    def write(self, tensor: SharedTensor, data: bytes, where: str) -> SharedTensor:
        """Write ``data`` where ``tensor`` names (it must fit in ``byte_size``); returns the
        place with the byte count written."""
        with self._using(tensor, where, "writing") as region:
            if len(data) > tensor.byte_size:
                raise InvalidRequestError(
                    f"{where}: shared_memory_byte_size {tensor.byte_size} is too small for the "
                    f"output's {len(data)} bytes")
            start = self._position(region, tensor, where, len(data))
            view, done = memoryview(data), 0
            while done < len(data):
                done += os.pwrite(region.fd, view[done:], start + done)
        return SharedTensor(tensor.region, tensor.offset, len(data))
