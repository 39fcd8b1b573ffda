"""The graph pass pipeline: which IR passes a graph's config and its modules' options
ask for, as one ordered list run by ``flowserve.ir.passes.manager.PassManager``.

On the traced IR (what a graph saves): activation checkpointing, weight-gradient
convolutions as matrix products, one gradient mask per clamp, AMP casts, cast fusion, the
stage/ZeRO records, dead-code removal (``GRAPH_PASSES``). On the private copy graph mode
lowers: in inference graphs run by ONNX Runtime, multi-head attention as its fused kernel;
the add-to-output fusion; in training graphs lowered for CUDA, batch norm's backward as one
node, ReLU's gradient mask as a sign, a convolution gradient's reshape-permute-reshape as
one permute; on CUDA, AMP's float16 matmuls and convolutions as native float16 kernels; the
ONNX backend lowering their fused nodes (``LOWERING_PASSES``).
Every pass returns ``PassResult(ir, modified)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flowserve.distributed.stages import record_stages
from flowserve.ir.graph import GraphIR, PassResult
from flowserve.ir.passes import eliminate_dead_code
from flowserve.ir.passes.amp import LOW_PRECISION, amp_cast
from flowserve.ir.passes.amp_native import amp_native_float16
from flowserve.ir.passes.batch_norm_grad import fuse_batch_norm_backward
from flowserve.ir.passes.checkpointing import checkpoint_activations
from flowserve.ir.passes.clamp_grad import fold_clamp_gradient_masks
from flowserve.ir.passes.conv_weight_grad import conv_weight_grad_as_matmul
from flowserve.ir.passes.fuse_add_to_output import fuse_add_to_output
from flowserve.ir.passes.fuse_attention import fuse_multi_head_attention
from flowserve.ir.passes.fuse_cast_scale import fuse_cast_scale
from flowserve.ir.passes.manager import Pass, PassManager
from flowserve.ir.passes.relu_grad import relu_grad_as_sign
from flowserve.ir.passes.unit_reshapes import collapse_unit_reshapes
from flowserve.onnx_backend import providers


@dataclass(frozen=True)
class PassContext:
    """What the graph passes read: the graph's config options, whether it trains, its
    modules' graph options (full name -> ``GraphModule``), the values the forward computed
    (from the trace), the world size of a launched run and the trace's constants (name ->
    array), to which a pass may add (None: passes add no constant)."""

    options: dict
    training: bool = False
    modules: dict = field(default_factory=dict)
    forward_values: frozenset = frozenset()
    world_size: int = 1
    constants: dict | None = None
    cuda: bool = False  # the lowering is for ONNX Runtime's CUDA provider (``flowserve.nn.graph.lowering``)

    @property
    def checkpointed_scopes(self) -> list[str]:
        return [name for name, gm in self.modules.items() if gm.activation_checkpointing]

    @property
    def stages(self) -> dict:
        return {name: gm.options() for name, gm in self.modules.items() if gm.stage_id is not None}

    @property
    def amp_dtype(self) -> str:
        return self.options.get("amp_dtype", "float16")

    @property
    def fuses_attention(self) -> bool:
        """Multi-head attention as one ONNX Runtime kernel: inference graphs (a training
        graph's backward reads the attention's intermediates), providers that run
        ``com.microsoft`` operators (ONNX Runtime's; not OpenVINO), ``allow_fused_attention`` on."""
        entry = providers.PROVIDERS.get(self.options.get("execution_provider", "auto"))  # None: "auto"
        return not self.training and self.constants is not None and \
            (entry is None or entry.microsoft_ops) and self.options.get("fused_attention", True)


def _native_low_precision(dtype: str) -> bool:
    """Whether the saved IR computes ``dtype`` natively. A saved graph is a deployment
    format: it must give the same numbers wherever it runs, not depend on the GPU of the
    machine that traced it. Native float16 rounds on CUDA but not on ONNX Runtime's CPU
    provider (which runs float16 Conv/MatMul in float32 with the casts removed), and the
    CPU provider has no bfloat16 kernels; the emulated form (inputs and outputs rounded
    through ``dtype``, float32 compute, as tensor cores accumulate) is the same on both.
    The CUDA lowering runs float16 natively on its private copy (``amp_native_float16`` in
    ``LOWERING_PASSES``): the saved IR stays emulated."""
    if dtype not in LOW_PRECISION:
        raise ValueError(f"AMP dtype must be one of {LOW_PRECISION}, got {dtype!r}")
    return False


def _record_stages(ir: GraphIR, ctx: PassContext) -> PassResult:
    """``ir.attrs["stages"]``; in a launched training run, each node's stage (each rank runs its own)."""
    stages = ctx.stages
    ir.attrs["stages"] = stages
    if ctx.training and ctx.world_size > 1:
        record_stages(ir, {name: o["stage_id"] for name, o in stages.items()}, ctx.forward_values)
    return PassResult(ir, True)


def _record_zero(ir: GraphIR, ctx: PassContext) -> PassResult:
    ir.attrs["zero"] = dict(ctx.options["zero"])
    return PassResult(ir, True)


GRAPH_PASSES = PassManager([
    Pass("activation_checkpointing",
         lambda ir, ctx: checkpoint_activations(ir, ctx.checkpointed_scopes, ctx.forward_values),
         when=lambda ctx: ctx.training and bool(ctx.checkpointed_scopes), requires=("forward_values",)),
    Pass("conv_weight_grad_as_matmul",
         lambda ir, ctx: conv_weight_grad_as_matmul(ir, ctx.options.get("stacked_weight_gradient", True),
                                                    ctx.constants),
         when=lambda ctx: ctx.training),
    Pass("fold_clamp_gradient_masks", lambda ir, ctx: fold_clamp_gradient_masks(ir), when=lambda ctx: ctx.training),
    Pass("amp", lambda ir, ctx: amp_cast(ir, ctx.amp_dtype, native=_native_low_precision(ctx.amp_dtype)),
         when=lambda ctx: bool(ctx.options.get("amp")), ensures=("amp_casts",),
         label=lambda ctx: f"amp({ctx.amp_dtype})"),
    Pass("fuse_cast_scale", lambda ir, ctx: fuse_cast_scale(ir), when=lambda ctx: bool(ctx.options.get("fuse_cast_scale"))),
    Pass("stages", _record_stages, when=lambda ctx: bool(ctx.stages), requires=("forward_values",),
         ensures=("stages",), reported=False),
    Pass("zero", _record_zero, when=lambda ctx: bool(ctx.options.get("zero")), reported=False),
    Pass("dce", lambda ir, ctx: eliminate_dead_code(ir), ensures=("no_dead_nodes",), reported=False),
], given=("forward_values",))

LOWERING_PASSES = PassManager([
    Pass("fuse_attention", lambda ir, ctx: fuse_multi_head_attention(ir, ctx.constants),
         when=lambda ctx: ctx.fuses_attention),
    Pass("fuse_add_to_output", lambda ir, ctx: fuse_add_to_output(ir),
         when=lambda ctx: bool(ctx.options.get("fuse_add_to_output"))),
    Pass("fuse_batch_norm_backward", lambda ir, ctx: fuse_batch_norm_backward(ir, ctx.constants),
         when=lambda ctx: ctx.cuda and ctx.training),
    Pass("relu_grad_as_sign", lambda ir, ctx: relu_grad_as_sign(ir, ctx.constants),
         when=lambda ctx: ctx.cuda and ctx.training),
    Pass("collapse_unit_reshapes", lambda ir, ctx: collapse_unit_reshapes(ir),
         when=lambda ctx: ctx.cuda and ctx.training),
    Pass("amp_native_float16", lambda ir, ctx: amp_native_float16(ir),
         when=lambda ctx: ctx.cuda and bool(ctx.options.get("amp")) and ctx.amp_dtype == "float16"),
], given=("no_dead_nodes",))


def run_graph_passes(ir: GraphIR, context: PassContext) -> list[str]:
    """Rewrite ``ir`` in place as ``context`` asks (``GRAPH_PASSES``); returns the passes
    that changed it, also recorded as ``ir.attrs["passes"]``."""
    _, applied = GRAPH_PASSES.run(ir, context)
    ir.attrs["passes"] = applied
    return applied


def lowering_ir(ir: GraphIR, options: dict, *, training: bool = False, constants: dict | None = None,
                cuda: bool = False) -> PassResult:
    """The IR graph mode lowers: a private copy when a graph-mode fusion applies (the
    ONNX backend lowers its fused nodes), else ``ir`` itself. ``training``: the graph
    trains; ``constants``: state name -> array of the trace's constants; ``cuda``: the
    lowering is for ONNX Runtime's CUDA provider."""
    context = PassContext(options, training=training, constants=constants, cuda=cuda)
    if not any(p.when(context) for p in LOWERING_PASSES.passes):
        return PassResult(ir, False)
    result, _ = LOWERING_PASSES.run(ir.copy(), context)
    return result if result.modified else PassResult(ir, False)
