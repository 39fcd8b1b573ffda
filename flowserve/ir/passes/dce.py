"""Dead-code elimination: keep the nodes that outputs and state updates need (the one DCE,
used by graph mode and the exporter alike)."""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, PassResult


def eliminate_dead_code(ir: GraphIR, *, drop_unused_state: bool = False) -> PassResult:
    """The one dead-code elimination: drop nodes no output or state update needs, values
    nothing uses, and unused constants (with ``drop_unused_state``, every unused state
    entry, as an export of an inference graph wants)."""
    needed = {v.name for v in ir.outputs} | set(ir.updates.values())
    kept = []
    for node in reversed(ir.nodes):
        if any(out in needed for out in node.outputs):
            kept.append(node)
            needed.update(node.inputs)
    kept.reverse()
    modified = len(kept) != len(ir.nodes)
    ir.nodes = kept
    live = needed | {v.name for v in ir.inputs} | {out for node in kept for out in node.outputs}
    ir.values = {k: v for k, v in ir.values.items() if k in live or k in ir.state}
    unused_constants = [k for k, kind in ir.state_kinds.items()
                        if k not in needed and (drop_unused_state or kind == "constant")]
    for k in unused_constants:
        del ir.state[k], ir.state_kinds[k]
        ir.values.pop(k, None)
    return PassResult(ir, modified or bool(unused_constants))
