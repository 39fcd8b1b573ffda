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
    ir.attrs[ATTR] = assign_stages(ir, module_stages, forward_values)
    ir.attrs[FORWARD_ATTR] = [n.outputs[0] for n in ir.nodes if all(o in forward_values for o in n.outputs)]


def assign_stages(ir: GraphIR, module_stages: dict, forward_values: set) -> dict:
    """First output name of each node -> its stage, for nodes that do not run everywhere."""
    of_value = _state_stages(ir, module_stages)
    anchors = set(of_value)  # values whose stage is where they live: state and forward activations
    out = {}
    for node in ir.nodes:
        staged = [n for n in node.inputs if n in of_value]
        if not staged:
            continue
        forward = all(o in forward_values for o in node.outputs)
        stage = _stage_by_prefix(node.scope, module_stages) if forward and node.scope else None
        if stage is None:
            anchored = [of_value[n] for n in staged if n in anchors]
            if anchored:
                stage = max(anchored) if forward else min(anchored)
            else:
                stage = max(of_value[n] for n in staged)
        for o in node.outputs:
            of_value[o] = stage
            if forward:
                anchors.add(o)
        out[node.outputs[0]] = stage
    return out


def stage_ranks(stages: dict) -> dict:
    """Stage id -> the rank that runs it (``placement``: a list of ranks, else the stage id)."""
    ranks = {}
    for options in stages.values():
        placement = options.get("placement")
        rank = placement[0] if isinstance(placement, list) and placement else options["stage_id"]
        ranks.setdefault(options["stage_id"], rank)
    return ranks
