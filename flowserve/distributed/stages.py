"""Which pipeline stage runs each node of a traced training step (see
``flowserve.distributed.pipeline`` for how the stages run). Pure IR analysis."""

from __future__ import annotations

from flowserve.errors import GraphError
from flowserve.ir.graph import GraphIR

ATTR = "pipeline_stages"  # ir.attrs: first output of a node -> its stage (absent: every rank)
FORWARD_ATTR = "pipeline_forward"  # ir.attrs: first outputs of the forward nodes


def _stage_by_prefix(name: str, stages: dict):
    best = None
    for module, stage in stages.items():
        if (name == module or name.startswith(module + ".")) and (best is None or len(module) > len(best[0])):
            best = (module, stage)
    return None if best is None else best[1]


def _state_stages(ir: GraphIR, stages: dict) -> dict:
    out = {}
    for name, kind in ir.state_kinds.items():
        if kind in ("constant", "system"):
            continue
        stage = _stage_by_prefix(name.split("-")[0], stages)
        if stage is None:
            raise GraphError(f"pipeline stages: state {name!r} belongs to no module with a stage; call "
                             "set_stage on every module that holds parameters or buffers")
        out[name] = stage
    return out


def record_stages(ir: GraphIR, module_stages: dict, forward_values: set) -> None:
    """Write the stage of each node into ``ir.attrs`` (nodes are kept by their names, which
    later passes keep), for ``PipelineGraph``."""
    forward = _forward_outputs(ir, forward_values)
    ir.attrs[ATTR] = assign_stages(ir, module_stages, forward)
    ir.attrs[FORWARD_ATTR] = [n.outputs[0] for n in ir.nodes if n.outputs[0] in forward]


def _forward_outputs(ir: GraphIR, forward_values: set) -> set:
    """Outputs of the forward nodes: recorded with gradients on (``forward_values``) and
    reading no value of the backward pass (a gradient accumulated across micro-batches is
    recorded with gradients on, but it is backward)."""
    backward, forward = set(), set()
    for node in ir.nodes:
        if all(o in forward_values for o in node.outputs) and not any(n in backward for n in node.inputs):
            forward.update(node.outputs)
        else:
            backward.update(node.outputs)
    return forward


def assign_stages(ir: GraphIR, module_stages: dict, forward_values: set) -> dict:
    """First output name of each node -> its stage, for nodes that do not run everywhere.

    Forward nodes: their module's stage, else (the loss) the latest stage they read.
    Update nodes (they read parameters or optimizer state): the stage of that state.
    Backward nodes: the latest stage among the values they read (the gradient arrives from
    the later stage); then, walking back from the updates, a backward node whose readers
    all sit on one other stage moves there (a gradient flowing back goes to the stage
    that will use it, a weight gradient stays with its weight)."""
    state_stage = _state_stages(ir, module_stages)
    of_value = dict(state_stage)
    out, backward = {}, []
    for node in ir.nodes:
        local = [n for n in node.inputs if n in of_value]
        if not local:
            continue  # reads only inputs, constants and system state: runs on every rank
        forward = all(o in forward_values for o in node.outputs)
        stages = [of_value[n] for n in local]
        stage = _stage_by_prefix(node.scope, module_stages) if forward and node.scope else None
        if stage is None and forward:
            stage = max(stages)
        elif stage is None:
            states = [state_stage[n] for n in local if n in state_stage]
            stage = min(states) if states else max(stages)
            backward.append(node)
        for o in node.outputs:
            of_value[o] = stage
        out[node.outputs[0]] = stage
    _follow_readers(ir, backward, state_stage, out)
    return out


def _follow_readers(ir: GraphIR, backward: list, state_stage: dict, out: dict) -> None:
    readers: dict = {}
    for node in ir.nodes:
        for name in node.inputs:
            readers.setdefault(name, []).append(node)
    updated = {value: state_stage.get(state) for state, value in ir.updates.items()}
    for node in reversed(backward):
        stages = {out[r.outputs[0]] for o in node.outputs for r in readers.get(o, ()) if r.outputs[0] in out}
        stages |= {updated[o] for o in node.outputs if updated.get(o) is not None}
        if len(stages) == 1:
            out[node.outputs[0]] = stages.pop()


def stage_ranks(stages: dict) -> dict:
    """Stage id -> the rank that runs it (``placement``: a list of ranks, else the stage id)."""
    ranks = {}
    for options in stages.values():
        placement = options.get("placement")
        rank = placement[0] if isinstance(placement, list) and placement else options["stage_id"]
        ranks.setdefault(options["stage_id"], rank)
    return ranks
