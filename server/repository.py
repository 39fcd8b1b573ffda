"""The model repository: which models exist, their versions, states and instances.

``settings.model_path`` is one of
  * an ``.onnx`` file or a saved graph directory: one model, version ``"1"``,
    named by ``--model-name``, the manifest's graph name, or the file stem;
  * a repository ``repo/<model>/<version>/`` (numeric versions, each holding
    ``model.onnx``, being a saved directory, or holding exactly one saved directory)
    with an optional ``repo/<model>/config.json``.

Every file of a model must resolve inside its folder (``repo/<model>/``): a link
out of it is refused. A model that fails to load, for whatever reason, is
``UNAVAILABLE`` with that reason in the index; the others still serve.

Names that come from requests are only ever looked up among the folders the
repository lists; they never become paths, so ``../`` reaches nothing::

    repository = ModelRepository(settings)
    await repository.load_all()          # a repository records failures; a single model raises
    model = repository.get("mlp")        # latest ready version
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
from typing import Callable, Optional

from flowserve.errors import FlowserveError
from flowserve.format.manifest import MANIFEST

from .config import CONFIG_FILE, ModelConfigFile, read_config, resolve
from .errors import ModelLoadError, ModelNotFoundError, ModelNotReadyError
from .loading import (
    check_contained,
    is_model_source,
    load_model_proto,
    nested_saved_directory,
    saved_graph_name,
)
from .model import ServedModel
from .settings import ServerSettings
from .verify import verify_before_ready

log = logging.getLogger("flowserve.server")

READY, UNAVAILABLE, LOADING = "READY", "UNAVAILABLE", "LOADING"


@dataclasses.dataclass
class IndexEntry:
    """One row of the repository index: a model version and its state."""

    name: str
    version: str
    state: str
    reason: str = ""


class ModelRepository:
    """Loads, serves, reloads and unloads the models of one ``model_path``."""

    def __init__(self, settings: ServerSettings, on_batch: Callable = None):
        self.settings = settings
        self._on_batch = on_batch
        self.path = pathlib.Path(settings.model_path)
        self.is_repository = self.path.is_dir() and not is_model_source(self.path)
        self._models: dict[str, dict[str, ServedModel]] = {}
        self._index: dict[str, list[IndexEntry]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def model_names(self) -> list[str]:
        """Names of the models the path holds (folders of a repository)."""
        if not self.is_repository:
            return [self._single_name()]
        return sorted(
            p.name for p in self.path.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def _single_name(self) -> str:
        if self.settings.model_name:
            return self.settings.model_name
        if self.path.is_dir() and (self.path / MANIFEST).is_file():
            try:
                return saved_graph_name(self.path)
            except ModelLoadError:
                return self.path.name
        return self.path.stem

    async def load_all(self) -> None:
        """Load every model; in a repository a model that fails is marked UNAVAILABLE with the
        reason and the others still serve, while a single model that fails raises."""
        if not self.path.exists():
            raise ModelLoadError(f"{self.path}: no such file or directory")
        for name in self.model_names():
            try:
                await self.load(name)
            except ModelLoadError as exc:  # load() turns every failure into one
                if not self.is_repository:
                    raise  # serving one model that cannot load: nothing to serve, say why and stop
                log.warning("model %s failed to load: %s", name, exc)

    async def load(self, name: str) -> None:
        """(Re)load model ``name``: the versions its policy selects, then swap them in."""
        if name not in self.model_names():
            raise ModelNotFoundError(f"unknown model {name!r}; the repository has "
                                     f"{self.model_names()}")
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            self._index[name] = [IndexEntry(name, "", LOADING)]
            versions = {}
            try:
                versions = await asyncio.to_thread(self._build_versions, name)
                for model in versions.values():
                    await model.start()
            except Exception as exc:  # any failure: this model is unavailable, the rest serve
                error = _load_error(name, exc)
                self._index[name] = [IndexEntry(name, "", UNAVAILABLE, str(error))]
                await self._retire(versions)
                await self._retire(self._models.pop(name, {}))
                raise error from None
            old = self._models.get(name, {})
            self._models[name] = versions
            self._index[name] = [IndexEntry(name, v, READY) for v in versions]
            await self._retire(old)
            sessions = {v: model.sessions for v, model in versions.items()}
            log.info("model %s loaded: versions %s, sessions %s", name, list(versions), sessions)

    async def unload(self, name: str) -> None:
        """Stop serving ``name`` (queued requests finish first)."""
        if name not in self._models and name not in self._index:
            raise ModelNotFoundError(f"unknown model {name!r}")
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            old = self._models.pop(name, {})
            self._index[name] = [IndexEntry(name, v, UNAVAILABLE, "unloaded") for v in old] or [
                IndexEntry(name, "", UNAVAILABLE, "unloaded")
            ]
            await self._retire(old)

    async def close(self) -> None:
        """Unload everything (graceful shutdown)."""
        for name in list(self._models):
            await self._retire(self._models.pop(name))

    @staticmethod
    async def _retire(versions: dict) -> None:
        for model in versions.values():
            await model.stop()

    def _build_versions(self, name: str) -> dict[str, ServedModel]:
        """Blocking part of a load (export, sessions, warmup); runs in a thread."""
        folder = self.path / name if self.is_repository else self.path
        root = folder if self.is_repository else None
        if self.is_repository:
            check_contained(folder, self.path)
            check_contained(folder / CONFIG_FILE, folder)
        config_file = read_config(folder) if self.is_repository else ModelConfigFile()
        config = resolve(config_file, self.settings)
        sources = self._version_sources(folder, config.version_policy)
        versions = {}
        for version, source in sources.items():
            proto = load_model_proto(source, root, provider=config.provider)
            model = ServedModel(name, version, proto, config, self._on_batch)
            verified = verify_before_ready(model, source, self.settings.skip_verify,
                                           self.settings.require_verified)
            model.parameters = {**verified, "sessions": model.sessions}
            versions[version] = model
        return versions

    def _version_sources(self, folder: pathlib.Path, policy) -> dict[str, pathlib.Path]:
        if not self.is_repository:
            return {"1": folder}
        numbered = {int(p.name): p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()}
        chosen = policy.select(list(numbered))
        if not chosen:
            raise ModelLoadError(f"{folder}: no version folder (1/, 2/, ...) matches the "
                                 f"version policy {policy.policy!r}")
        for version in chosen:
            source = numbered[version]
            check_contained(source, folder)
            if not is_model_source(source) and nested_saved_directory(source) is None:
                raise ModelLoadError(f"{source}: holds neither model.onnx, {MANIFEST} "
                                     "nor exactly one saved directory")
        return {str(v): numbered[v] for v in chosen}

    def get(self, name: str, version: str = "") -> ServedModel:
        """The ready model ``name`` at ``version`` (latest when empty)."""
        versions = self._models.get(name)
        if versions is None:
            entries = self._index.get(name)
            if entries is None:
                raise ModelNotFoundError(f"unknown model {name!r}")
            reason = entries[0].reason or entries[0].state.lower()
            raise ModelNotReadyError(f"model {name!r} is not ready: {reason}")
        if not version:
            return versions[max(versions, key=int)]
        if version not in versions:
            raise ModelNotFoundError(
                f"unknown version {version!r} of model {name!r}; served: {sorted(versions)}"
            )
        return versions[version]

    def versions(self, name: str) -> list[str]:
        """Served versions of ``name``, ascending."""
        return sorted(self._models.get(name, {}), key=int)

    def loaded(self) -> list[ServedModel]:
        """Every served model version (copies of the dicts first: ``metrics.publish``
        calls this from a thread while the event loop may load or unload a model)."""
        return [m for versions in list(self._models.values()) for m in list(versions.values())]

    def index(self) -> list[IndexEntry]:
        """State of every model the path holds (never loaded ones too)."""
        rows = []
        for name in self.model_names():
            rows += self._index.get(name, [IndexEntry(name, "", UNAVAILABLE, "not loaded")])
        return rows

    @property
    def ready(self) -> bool:
        """True when at least one model is served and none is failing or loading."""
        if not self._models:
            return False
        for entries in self._index.values():
            if any(e.state == LOADING or (e.state == UNAVAILABLE and e.reason != "unloaded")
                   for e in entries):
                return False
        return True

    def find(self, name: str, version: str = "") -> Optional[ServedModel]:
        """Like ``get`` but None when not ready/unknown."""
        try:
            return self.get(name, version)
        except (ModelNotFoundError, ModelNotReadyError):
            return None


def _load_error(name: str, exc: Exception) -> ModelLoadError:
    """``exc`` as the one-line ``ModelLoadError`` the index and the client see."""
    if isinstance(exc, FlowserveError):
        message = str(exc)
    else:
        log.error("model %s: unexpected failure while loading", name, exc_info=exc)
        message = f"model {name!r} could not be loaded: {type(exc).__name__}: {exc}"
    one_line = " ".join(message.split())
    return ModelLoadError(one_line if len(one_line) <= 1000 else one_line[:997] + "...")
