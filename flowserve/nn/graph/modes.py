"""What a graph is compiled for besides its inputs: each module's ``training`` flag and, in
a training graph, each parameter's ``requires_grad``.

Eager mode reads them on every call (dropout and batch norm follow ``model.eval()``, a
parameter set to ``requires_grad=False`` gets no gradient and no update); a trace reads them
once. So a graph keeps one compiled form per set of them, and a call after ``model.eval()``
runs (compiling at its first such call) the form traced in eval mode, as eagerly. A
parameter, buffer or submodule replaced (``model.fc = nn.Linear(...)``) makes the graph trace
again: its compiled forms hold the tensors they were traced with.
"""

from __future__ import annotations

import operator

_TRAINING = operator.attrgetter("training")
_REQUIRES_GRAD = operator.attrgetter("requires_grad")
_STRUCTURE = operator.attrgetter("_structure_version")


class Modes:
    """The modules and parameters whose flags a graph's compiled forms are told apart by."""

    def __init__(self, modules: list, params: list):
        self.modules = modules  # (full name, module)
        self.params = params  # (full name, parameter); empty for an inference graph
        self._modules = [m for _, m in modules]
        self._params = [p for _, p in params]
        self._structure = tuple(map(_STRUCTURE, self._modules))

    @classmethod
    def of(cls, graph) -> "Modes":
        """The graph's modules (and, training, parameters) as they are held now."""
        modules, params, seen = [], [], set()
        for attr, module in graph._original_modules().items():
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

    def restructured(self) -> bool:
        """Whether a parameter, buffer or child module of these modules was set, replaced or
        removed since they were noted: the graph's compiled forms read the old tensors."""
        return tuple(map(_STRUCTURE, self._modules)) != self._structure

    def current(self) -> tuple:
        """The flags now, in a fixed order (a dictionary key)."""
        return tuple(map(_TRAINING, self._modules)) + tuple(map(_REQUIRES_GRAD, self._params))

    def changes(self, before: tuple, now: tuple, limit: int = 3) -> str:
        """Which flags differ between ``before`` and ``now``, for the debug log."""
        names = [f"{n} training" for n, _ in self.modules] + [f"{n} requires_grad" for n, _ in self.params]
        changed = [f"{name} {a} -> {b}" for name, a, b in zip(names, before, now) if a != b]
        more = f" and {len(changed) - limit} more" if len(changed) > limit else ""
        return ", ".join(changed[:limit]) + more
