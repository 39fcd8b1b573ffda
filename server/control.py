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
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
import time
from typing import Optional

from .errors import ModelLoadError, ModelNotFoundError
from .repository import ModelRepository
from .settings import ServerSettings

log = logging.getLogger("flowserve.server")

JOURNAL = "model-control.jsonl"
ACTIONS = ("load", "unload")


class ModelControl:
    """The load/unload requests of one worker, shared with the other workers."""

    def __init__(self, repository: ModelRepository, settings: ServerSettings):
        self.repository = repository
        shared = settings.shared_metrics_dir
        self.journal = pathlib.Path(shared) / JOURNAL if shared else None
        self.sync_timeout_s = settings.model_control_sync_timeout_s
        self.worker = os.getpid()
        self.offset = 0  # bytes of the journal this worker has followed
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Load every model, then follow what the journal says happened since the server
        started (a restarted worker unloads what its peers unloaded)."""
        before = self._journal_size()
        await self.repository.load_all()
        async with self._lock:
            entries = self._read_new()
            await self._apply(entries, reload_from=before)
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

    def _journal_size(self) -> int:
        try:
            return self.journal.stat().st_size if self.journal is not None else 0
        except FileNotFoundError:
            return 0

    def _append(self, entry: dict) -> int:
        """One line at the journal's end (``O_APPEND``: whole lines, never interleaved);
        the journal's size after it."""
        line = (json.dumps(entry) + "\n").encode()
        fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def _read_new(self) -> list:
        """``(offset, entry)`` for each whole line appended since the last read."""
        if self.journal is None or self._journal_size() <= self.offset:
            return []
        with open(self.journal, "rb") as file:
            file.seek(self.offset)
            data = file.read()
        whole = data[: data.rfind(b"\n") + 1]
        entries, position = [], self.offset
        for line in whole.splitlines(keepends=True):
            entry = _entry(line)
            if entry is not None:
                entries.append((position, entry))
            position += len(line)
        self.offset += len(whole)
        return entries

    def _acknowledge(self) -> None:
        """Publish how far this worker has followed the journal (atomically)."""
        if self.journal is None:
            return
        target = acknowledgement(self.journal.parent, self.worker)
        partial = target.with_suffix(".partial")
        partial.write_text(json.dumps({"offset": self.offset}))
        os.replace(partial, target)

    async def _wait_for_peers(self, end: int) -> None:
        """Until every other live worker has followed the journal up to ``end``."""
        deadline = time.monotonic() + self.sync_timeout_s
        while True:
            behind = [pid for pid, offset in self._peer_offsets().items() if offset < end]
            if not behind:
                return
            if time.monotonic() > deadline:
                log.warning("model control: workers did not follow in time",
                            extra={"workers": behind, "timeout_s": self.sync_timeout_s})
                return
            await asyncio.sleep(0.05)

    def _peer_offsets(self) -> dict[int, int]:
        """How far each other live worker has followed the journal, by process id."""
        offsets = {}
        for path in self.journal.parent.glob("control-*.json"):
            suffix = path.stem.removeprefix("control-")
            pid = int(suffix) if suffix.isdigit() else None
            if pid is None or pid == self.worker or not _alive(pid):
                continue
            try:
                offsets[pid] = int(json.loads(path.read_text())["offset"])
            except (FileNotFoundError, ValueError, KeyError, TypeError):
                continue  # gone, or being replaced: read again on the next round
        return offsets


def acknowledgement(shared_dir, pid: int) -> pathlib.Path:
    """The file where worker ``pid`` says how far it has followed the journal."""
    return pathlib.Path(shared_dir) / f"control-{pid}.json"


def _entry(line: bytes) -> Optional[dict]:
    """A journal line as ``{"action", "model", "worker"}``; None (with a warning) if it is not one."""
    try:
        entry = json.loads(line)
    except ValueError:
        entry = None
    if not (isinstance(entry, dict) and entry.get("action") in ACTIONS and isinstance(entry.get("model"), str)
            and isinstance(entry.get("worker"), int)):
        log.warning("skipped a malformed model control line", extra={"line": repr(line[:120])})
        return None
    return entry


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
