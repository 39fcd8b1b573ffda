"""What a graph is compiled for besides its inputs: each module's ``training`` flag and, in
a training graph, each parameter's ``requires_grad``.

Eager mode reads them on every call (dropout and batch norm follow ``model.eval()``, a
parameter set to ``requires_grad=False`` gets no gradient and no update); a trace reads them
once. So a graph keeps one compiled form per set of them, and a call after ``model.eval()``
runs (compiling at its first such call) the form traced in eval mode, as eagerly. A
parameter, buffer or submodule replaced (``model.fc = nn.Linear(...)``) makes the graph trace
again: its compiled forms hold the tensors they were traced with. So does a change to a plain
value the trace read from a module (``self.temperature = 0.5``, ``self.stride = (2, 2)``):
the trace wrote it into the graph as a constant.

Checking costs one counter per module per call: every attribute set on a module counts
(``Module._assignments``), and only when a count moved are the values the traces read compared.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
import threading

from flowserve.nn.module import Module

_TRAINING = operator.attrgetter("training")
_REQUIRES_GRAD = operator.attrgetter("requires_grad")
_STRUCTURE = operator.attrgetter("_structure_version")
_ASSIGNMENTS = operator.attrgetter("_assignments")
_SCALARS = frozenset({bool, int, float, complex, str, type(None)})
_FOLLOWED_ELSEWHERE = frozenset({"training", "_assignments", "_structure_version"})
_MISSING = object()


def _constant_kind(value) -> bool:
    """A value a trace writes into the graph as it is: a number, string, None, or a tuple of
    those (lists and other objects can change without an assignment the module sees)."""
    kind = type(value)
    return kind in _SCALARS or (kind is tuple and all(type(v) in _SCALARS for v in value))


def _same(a, b) -> bool:
    return a is b or (type(a) is type(b) and a == b)


class _Reads:
    """The (module, attribute) pairs read during one trace."""

    def __init__(self):
        self.pairs: dict[int, tuple[Module, set]] = {}

    def note(self, module: Module, name: str) -> None:
        entry = self.pairs.get(id(module))
        if entry is None:
            entry = self.pairs[id(module)] = (module, set())
        entry[1].add(name)


_current_reads: contextvars.ContextVar = contextvars.ContextVar("flowserve_module_reads", default=None)


def _noting_getattribute(module, name: str):
    value = object.__getattribute__(module, name)
    reads = _current_reads.get()
    if (reads is not None and not name.startswith("__") and name not in _FOLLOWED_ELSEWHERE
            and _constant_kind(value)):
        reads.note(module, name)
    return value


class _ReadHook:
    """``Module.__getattribute__`` that notes reads, set while any trace runs (eager mode
    pays nothing)."""

    def __init__(self):
        self.lock, self.tracing = threading.Lock(), 0

    @contextlib.contextmanager
    def noting(self):
        with self.lock:
            if self.tracing == 0:
                Module.__getattribute__ = _noting_getattribute
            self.tracing += 1
        reads = _Reads()
        token = _current_reads.set(reads)
        try:
            yield reads
        finally:
            _current_reads.reset(token)
            with self.lock:
                self.tracing -= 1
                if self.tracing == 0:
                    del Module.__getattribute__


noting_module_reads = _ReadHook().noting


class Modes:
    """The modules and parameters whose flags a graph's compiled forms are told apart by."""

    def __init__(self, modules: list, params: list):
        self.modules = modules  # (full name, module)
        self.params = params  # (full name, parameter); empty for an inference graph
        self._modules = [m for _, m in modules]
        self._params = [p for _, p in params]
        self._structure = tuple(map(_STRUCTURE, self._modules))
        self._versions = tuple(map(_ASSIGNMENTS, self._modules))
        self._index = {id(m): i for i, m in enumerate(self._modules)}
        self._read: dict[int, dict] = {}  # module index -> {attribute: value after the trace}

    @classmethod
    def of(cls, graph) -> "Modes":
        """The graph's modules (and, training, parameters) as they are held now."""
        modules, params, seen = [], [], set()
        for attr, module in graph.original_modules().items():
            for name, m in module.named_modules(prefix=attr):
                if id(m) not in seen:
                    seen.add(id(m))
                    modules.append((name, m))
            if graph.training:
                for name, p in module.named_parameters(prefix=attr):
                    if id(p) not in seen:
                        seen.add(id(p))
                        params.append((name, p))
        return cls(modules, params)

    def note_reads(self, reads: _Reads) -> None:
        """Keep the values of the attributes one trace read (as they are after it: a forward
        that counts its calls in an attribute does not make every call trace again)."""
        for module, names in reads.pairs.values():
            index = self._index.get(id(module))
            if index is not None:
                read = self._read.setdefault(index, {})
                for name in names:
                    read[name] = getattr(module, name, _MISSING)
        self._versions = tuple(map(_ASSIGNMENTS, self._modules))

    def stale(self) -> tuple[str, list]:
        """Why the compiled forms no longer hold, and the attributes read by a trace that
        changed: a parameter, buffer or child module set, replaced or removed, or a value a
        trace read changed since; ("", []) while they hold."""
        versions = tuple(map(_ASSIGNMENTS, self._modules))
        if versions == self._versions:
            return "", []
        if tuple(map(_STRUCTURE, self._modules)) != self._structure:
            return "a parameter, buffer, submodule or hook of the graph was set, replaced or removed since the last call", []
        changed = []
        for index, (before, now) in enumerate(zip(self._versions, versions)):
            if before != now:
                module = self._modules[index]
                for name, value in self._read.get(index, {}).items():
                    if not _same(value, current := getattr(module, name, _MISSING)):
                        changed.append((f"{self.modules[index][0]}.{name}", value, current))
        if not changed:
            self._versions = versions  # only attributes no trace read were set
            return "", []
        shown = ", ".join(f"{name} {_shown(a)} -> {_shown(b)}" for name, a, b in changed[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return (f"values the trace read changed since the last call ({shown}{more})",
                [name for name, _, _ in changed])

    def current(self) -> tuple:
        """The flags now, in a fixed order (a dictionary key)."""
        return tuple(map(_TRAINING, self._modules)) + tuple(map(_REQUIRES_GRAD, self._params))

    def changes(self, before: tuple, now: tuple, limit: int = 3) -> str:
        """Which flags differ between ``before`` and ``now``, for the debug log."""
        names = [f"{n} training" for n, _ in self.modules] + [f"{n} requires_grad" for n, _ in self.params]
        changed = [f"{name} {a} -> {b}" for name, a, b in zip(names, before, now) if a != b]
        more = f" and {len(changed) - limit} more" if len(changed) > limit else ""
        return ", ".join(changed[:limit]) + more


def _shown(value) -> str:
    return "(deleted)" if value is _MISSING else repr(value)
