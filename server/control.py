"""Model control across the workers of ``--workers N``: a load or unload request reaches
one worker (the kernel picks it), and every worker must follow it.

The workers share a journal in the server's shared folder (``shared_metrics_dir``, where
they also share their metrics): the worker that serves a load or unload appends one JSON
line (``{"action": "load", "model": "mlp", "worker": pid}``) once it has done it; every
worker reads the lines appended since it last looked, a tenth of a second apart, and
brings each model to the state its last line says. The worker that served the request
answers once every other live worker has caught up (``control-<pid>.json`` holds how far
each has read), within ``model_control_sync_timeout_s``. A worker that starts later (a
restart) replays the journal after loading its models, so it serves what its peers serve.
One lock per worker orders its own requests and its catching up: a model's state on every
worker is the one of its last journal line. Without a shared folder (one process) this is
the repository's own load and unload::

    control = ModelControl(repository, settings)
    await control.start()              # load_all, then the journal's unloads
    await control.unload("mlp")        # this worker, then every other one

The journal stays bounded: once an append takes it past ``compact_at_bytes``, the worker
that appended rewrites it (under a lock file that every append takes) as its current
state, one line per model, after a header naming the new generation. Offsets count within
a generation (acknowledgements carry both); a worker that finds a new generation skips
the lines it had already followed (each snapshot line keeps its position in the previous
journal) and applies the others, so it ends where reading the old journal to its end would
have taken it.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import pathlib
import time
from contextlib import contextmanager
from typing import Optional

from .errors import ModelLoadError, ModelNotFoundError
from .repository import ModelRepository
from .settings import ServerSettings

log = logging.getLogger("flowserve.server")

JOURNAL = "model-control.jsonl"
ACTIONS = ("load", "unload")
COMPACT_AT_BYTES = 1 << 20  # a journal past this is rewritten as its current state


class ModelControl:
    """The load/unload requests of one worker, shared with the other workers."""

    def __init__(self, repository: ModelRepository, settings: ServerSettings,
                 compact_at_bytes: int = COMPACT_AT_BYTES):
        self.repository = repository
        shared = settings.shared_metrics_dir
        self.journal = pathlib.Path(shared) / JOURNAL if shared else None
        self.sync_timeout_s = settings.model_control_sync_timeout_s
        self.compact_at_bytes = compact_at_bytes
        self.worker = os.getpid()
        self.generation: Optional[int] = None  # the journal's generation ``offset`` counts in (None: not read yet)
        self.offset = 0  # bytes of the journal this worker has followed
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Load every model, then follow what the journal says happened since the server
        started (a restarted worker unloads what its peers unloaded)."""
        before = self._journal_mark()
        await self.repository.load_all()
        async with self._lock:
            entries = self._read_new()
            same = before[0] == (self.generation or 0)  # else compacted meanwhile: every load is newer
            await self._apply(entries, reload_from=before[1] if same else 0)
            self._acknowledge()

    async def load(self, name: str) -> None:
        await self._control("load", name)

    async def unload(self, name: str) -> None:
        await self._control("unload", name)

    async def follow(self, every_s: float = 0.1) -> None:
        """Catch up with the other workers' requests until cancelled."""
        if self.journal is None:
            return
        while True:
            await asyncio.sleep(every_s)
            async with self._lock:
                try:
                    await self._apply(self._read_new())
                    self._acknowledge()
                except OSError as exc:  # the shared folder unreadable for a moment: next round
                    log.warning("could not follow the model control journal", extra={"error": f"{exc!s:.200}"})

    async def _control(self, action: str, name: str) -> None:
        act = getattr(self.repository, action)
        if self.journal is None:  # one process: the repository's own (per-model) locking
            await act(name)
            return
        failure = None
        async with self._lock:
            await self._apply(self._read_new())  # the peers' earlier requests come first
            self._acknowledge()
            try:
                await act(name)
            except ModelLoadError as exc:  # unavailable here: the peers try the same files
                failure = exc
            end = self._append({"action": action, "model": name, "worker": self.worker})
        await self._wait_for_peers(end)
        if failure is not None:
            raise failure

    async def _apply(self, entries: list, reload_from: Optional[int] = None) -> None:
        """Bring each model named by ``entries`` to the state of its last entry, unless this
        worker wrote that one (it did it already). With ``reload_from`` (a worker's start):
        an unload, or a load written at or after that offset (its files may be newer than
        what ``load_all`` read)."""
        last = {}
        for position, entry in entries:
            last[entry["model"]] = (position, entry)
        for name, (position, entry) in last.items():
            if entry["worker"] == self.worker:
                continue
            if reload_from is not None and entry["action"] == "load" and position < reload_from:
                continue
            try:
                await getattr(self.repository, entry["action"])(name)
            except (ModelLoadError, ModelNotFoundError) as exc:  # the index says why
                log.warning("model control from another worker failed here",
                            extra={"model": name, "action": entry["action"], "error": f"{exc!s:.300}"})

    def _journal_mark(self) -> tuple[int, int]:
        """The journal's ``(generation, size)`` now."""
        if self.journal is None:
            return 0, 0
        try:
            with open(self.journal, "rb") as file:
                header, _ = _read_header(file)
                return header["generation"], os.fstat(file.fileno()).st_size
        except FileNotFoundError:
            return 0, 0

    def _append(self, entry: dict) -> tuple[int, int]:
        """One line at the journal's end, then, past ``compact_at_bytes``, the journal
        rewritten as its state; the ``(generation, size)`` that includes the line."""
        line = (json.dumps(entry) + "\n").encode()
        with _locked(self.journal):
            fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            compacted = _compact(self.journal) if size > self.compact_at_bytes else None
            return compacted or self._journal_mark()

    def _read_new(self) -> list:
        """``(offset, entry)`` for each whole line appended since the last read; after the
        journal was compacted, its snapshot's lines this worker had not followed yet."""
        if self.journal is None:
            return []
        try:
            with open(self.journal, "rb") as file:
                header, header_end = _read_header(file)
                entries = []
                if header["generation"] != self.generation:
                    entries = self._enter_generation(file, header, header_end)
                file.seek(self.offset)
                data = file.read()
        except FileNotFoundError:
            return []
        entries += _parse(data[: data.rfind(b"\n") + 1], self.offset)
        self.offset += data.rfind(b"\n") + 1
        return entries

    def _enter_generation(self, file, header: dict, header_end: int) -> list:
        """Move to the journal's generation: a first read starts after its header; a worker
        that followed the generation it was compacted from takes the snapshot's lines
        written at or after its ``offset`` there (all of them where it missed a generation)."""
        previous, followed = self.generation, self.offset
        self.generation, self.offset = header["generation"], header_end
        if previous is None:
            return []
        file.seek(header_end)
        snapshot = b"".join(file.readline() for _ in range(header["snapshot"]))
        self.offset = header_end + len(snapshot)
        follows = header["from"] == previous
        return [(position, entry) for position, entry in _parse(snapshot, header_end)
                if not follows or entry.get("at", 0) >= followed]

    def _acknowledge(self) -> None:
        """Publish how far this worker has followed the journal (atomically)."""
        if self.journal is None:
            return
        target = acknowledgement(self.journal.parent, self.worker)
        partial = target.with_suffix(".partial")
        partial.write_text(json.dumps({"generation": self.generation or 0, "offset": self.offset}))
        os.replace(partial, target)

    async def _wait_for_peers(self, end: tuple[int, int]) -> None:
        """Until every other live worker has followed the journal up to ``end``
        (``(generation, offset)``)."""
        deadline = time.monotonic() + self.sync_timeout_s
        while True:
            behind = [pid for pid, mark in self._peer_offsets().items() if mark < end]
            if not behind:
                return
            if time.monotonic() > deadline:
                log.warning("model control: workers did not follow in time",
                            extra={"workers": behind, "timeout_s": self.sync_timeout_s})
                return
            await asyncio.sleep(0.05)

    def _peer_offsets(self) -> dict[int, tuple[int, int]]:
        """How far each other live worker has followed the journal, ``(generation, offset)``
        by process id."""
        offsets = {}
        for path in self.journal.parent.glob("control-*.json"):
            suffix = path.stem.removeprefix("control-")
            pid = int(suffix) if suffix.isdigit() else None
            if pid is None or pid == self.worker or not _alive(pid):
                continue
            try:
                mark = json.loads(path.read_text())
                offsets[pid] = (int(mark.get("generation", 0)), int(mark["offset"]))
            except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError):
                continue  # gone, or being replaced: read again on the next round
        return offsets


def acknowledgement(shared_dir, pid: int) -> pathlib.Path:
    """The file where worker ``pid`` says how far it has followed the journal."""
    return pathlib.Path(shared_dir) / f"control-{pid}.json"


def _entry(line: bytes) -> Optional[dict]:
    """A journal line as ``{"action", "model", "worker"}``; None if it is not one (with a
    warning, unless it is a compacted journal's header)."""
    try:
        entry = json.loads(line)
    except ValueError:
        entry = None
    if _is_header(entry):
        return None
    if not (isinstance(entry, dict) and entry.get("action") in ACTIONS and isinstance(entry.get("model"), str)
            and isinstance(entry.get("worker"), int)):
        log.warning("skipped a malformed model control line", extra={"line": repr(line[:120])})
        return None
    return entry


def _is_header(value) -> bool:
    return (isinstance(value, dict) and "action" not in value and isinstance(value.get("generation"), int)
            and isinstance(value.get("snapshot"), int))


def _read_header(file) -> tuple[dict, int]:
    """The header of the journal open as ``file`` and the offset after it: ``{"generation",
    "from", "snapshot"}`` (the generation, the one it was compacted from, how many snapshot
    lines follow). A journal never compacted has none: generation 0."""
    file.seek(0)
    line = file.readline()
    try:
        header = json.loads(line) if line.endswith(b"\n") else None
    except ValueError:
        header = None
    if _is_header(header):
        return header, len(line)
    return {"generation": 0, "from": None, "snapshot": 0}, 0


def _parse(data: bytes, start: int) -> list:
    """``(offset, entry)`` for each entry among the whole lines ``data``, read at ``start``."""
    entries, position = [], start
    for line in data.splitlines(keepends=True):
        entry = _entry(line)
        if entry is not None:
            entries.append((position, entry))
        position += len(line)
    return entries


@contextmanager
def _locked(journal: pathlib.Path):
    """The journal's lock file held: appends and compaction exclude each other across workers."""
    fd = os.open(journal.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _compact(journal: pathlib.Path) -> Optional[tuple[int, int]]:
    """Rewrite ``journal`` (its lock held) as its state: a header naming the next generation,
    then each model's last entry with its position (``at``) in this one. Returns the new
    ``(generation, size)``; None (unchanged) where that would not halve its entries."""
    with open(journal, "rb") as file:
        header, _ = _read_header(file)
        file.seek(0)
        data = file.read()
    entries = _parse(data[: data.rfind(b"\n") + 1], 0)
    last = {}
    for position, entry in entries:
        last[entry["model"]] = {"action": entry["action"], "model": entry["model"], "worker": entry["worker"],
                                "at": position}
    if 2 * len(last) > len(entries):
        return None
    generation = header["generation"] + 1
    head = {"generation": generation, "from": header["generation"], "snapshot": len(last)}
    lines = [head] + sorted(last.values(), key=lambda entry: entry["at"])
    text = "".join(json.dumps(line) + "\n" for line in lines).encode()
    partial = journal.with_suffix(".compacting")
    partial.write_bytes(text)
    os.replace(partial, journal)  # readers see the old journal or the new one, whole
    return generation, len(text)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
