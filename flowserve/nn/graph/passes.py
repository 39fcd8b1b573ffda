"""Which IR passes a graph's config and its modules' options ask for, in order.

On the traced IR (what a graph saves): activation checkpointing, weight-gradient
convolutions as matrix products, one gradient mask per clamp, AMP casts, cast fusion, and the stage/ZeRO records. On
the private copy graph mode lowers: the add-to-output fusion (the ONNX backend lowers its
fused node). Every pass returns ``PassResult(ir, modified)``.
"""

from __future__ import annotations

from flowserve import env
from flowserve.distributed.stages import record_stages
from flowserve.ir.graph import GraphIR, PassResult
from flowserve.ir.passes import eliminate_dead_code
from flowserve.ir.passes.amp import LOW_PRECISION, amp_cast
from flowserve.ir.passes.checkpointing import checkpoint_activations
from flowserve.ir.passes.clamp_grad import fold_clamp_gradient_masks
from flowserve.ir.passes.conv_weight_grad import conv_weight_grad_as_matmul
from flowserve.ir.passes.fuse_add_to_output import fuse_add_to_output
from flowserve.ir.passes.fuse_cast_scale import fuse_cast_scale


def _native_low_precision(dtype: str) -> bool:
    """Whether the saved IR computes ``dtype`` natively. A saved graph is a deployment
    format: it must give the same numbers wherever it runs, not depend on the GPU of the
    machine that traced it. Native float16 rounds on CUDA but not on ONNX Runtime's CPU
    provider (which runs float16 Conv/MatMul in float32 with the casts removed), and the
    CPU provider has no bfloat16 kernels; the emulated form (inputs and outputs rounded
    through ``dtype``, float32 compute, as tensor cores accumulate) is the same on both."""
    if dtype not in LOW_PRECISION:
        raise ValueError(f"AMP dtype must be one of {LOW_PRECISION}, got {dtype!r}")
    return False


def run_graph_passes(graph, ir: GraphIR, tracer) -> list[str]:
    """Rewrite ``ir`` in place as ``graph.config`` asks; returns the passes that changed it."""
    options = graph.config.options
    applied = []
    modules = graph._graph_modules()
    scopes = [name for name, gm in modules.items() if gm.activation_checkpointing]
    if graph.training and scopes:
        if checkpoint_activations(ir, scopes, tracer.forward_values)[1]:
            applied.append("activation_checkpointing")
    if graph.training and conv_weight_grad_as_matmul(ir)[1]:
        applied.append("conv_weight_grad_as_matmul")
    if graph.training and fold_clamp_gradient_masks(ir).modified:
        applied.append("fold_clamp_gradient_masks")
    if options.get("amp"):
        dtype = options.get("amp_dtype", "float16")
        if amp_cast(ir, dtype, native=_native_low_precision(dtype))[1]:
            applied.append(f"amp({dtype})")
    if options.get("fuse_cast_scale") and fuse_cast_scale(ir)[1]:
        applied.append("fuse_cast_scale")
    stages = {name: gm.options() for name, gm in modules.items() if gm.stage_id is not None}
    if stages:
        ir.attrs["stages"] = stages
        if graph.training and env.get_world_size() > 1:  # each rank runs its stage's nodes
            record_stages(ir, {name: o["stage_id"] for name, o in stages.items()}, tracer.forward_values)
    if options.get("zero"):
        ir.attrs["zero"] = dict(options["zero"])
    eliminate_dead_code(ir)
    ir.attrs["passes"] = applied
    graph._log(1, f"graph passes applied: {', '.join(applied) or 'none'}")
    return applied


def lowering_ir(ir: GraphIR, options: dict) -> PassResult:
    """The IR graph mode lowers: a private copy when a graph-mode fusion applies (the
    ONNX backend lowers its fused nodes), else ``ir`` itself."""
    if not options.get("fuse_add_to_output"):
        return PassResult(ir, False)
    copy, changed = fuse_add_to_output(ir.copy())
    return PassResult(copy, True) if changed else PassResult(ir, False)
