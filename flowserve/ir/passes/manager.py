"""One pass runner for the core's IR pipelines: an ordered list of ``Pass`` entries.

Each entry names a pass, says when it applies (``when(context)``), and runs it
(``run(ir, context) -> PassResult``). ``requires`` and ``ensures`` name facts about the
IR: a pass may run only where every fact it requires is known before it (given by the
trace in ``PassManager(..., given=...)``, or ensured by an earlier pass that applies in
the same list), so a list in the wrong order fails when it is made, not when a graph
traces.

>>> manager = PassManager([Pass("dce", lambda ir, ctx: eliminate_dead_code(ir))])  # doctest: +SKIP
>>> ir, applied = manager.run(ir, context)                                            # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from flowserve.ir.graph import GraphIR, PassResult


def _always(context) -> bool:
    return True


@dataclass(frozen=True)
class Pass:
    """``name``: how reports and ``ir.attrs["passes"]`` call it; ``run``: the pass;
    ``when``: whether the context asks for it; ``requires``/``ensures``: facts it needs
    before it, and facts it makes true; ``label``: the name it is reported under when it
    depends on the context (``amp(float16)``)."""

    name: str
    run: Callable[[GraphIR, Any], PassResult]
    when: Callable[[Any], bool] = _always
    requires: tuple = ()
    ensures: tuple = ()
    label: Callable[[Any], str] | None = None
    reported: bool = True  # False: bookkeeping (records, dead-code removal), not listed as applied


class PassManager:
    """Runs its passes in order on one IR; checks at construction that every pass's
    ``requires`` is given or ensured by an earlier pass."""

    def __init__(self, passes, given=()):
        self.passes = tuple(passes)
        known = set(given)
        for p in self.passes:
            missing = [fact for fact in p.requires if fact not in known]
            if missing:
                raise ValueError(f"pass {p.name!r} requires {', '.join(missing)}, which no earlier pass ensures "
                                 f"(given: {', '.join(sorted(given)) or 'nothing'})")
            known.update(p.ensures)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    def run(self, ir: GraphIR, context) -> tuple[PassResult, list[str]]:
        """Run every pass that applies; returns ``PassResult(ir, modified)`` and the names
        of the reported passes that changed the IR."""
        applied, modified = [], False
        for p in self.passes:
            if not p.when(context):
                continue
            result = p.run(ir, context)
            if not isinstance(result, PassResult):
                raise TypeError(f"pass {p.name!r} returned {type(result).__name__}, expected PassResult(ir, modified)")
            ir = result.ir
            modified = modified or result.modified
            if result.modified and p.reported:
                applied.append(p.label(context) if p.label is not None else p.name)
        return PassResult(ir, modified), applied
