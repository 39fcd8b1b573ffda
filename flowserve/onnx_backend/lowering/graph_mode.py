"""Lowerings of the nodes that graph mode's own IR fusions make (never in a saved graph,
so not primitives): ``fused.AddToOutput`` is ONNX ``Gemm`` (``y = x @ w + c``),
``fused.BatchNormBackward`` batch norm's gradient for CUDA (``lowering/norm.py``),
``fused.MultiHeadAttention`` ONNX Runtime's ``com.microsoft.MultiHeadAttention`` (the pass
that makes it runs only where ONNX Runtime runs the graph). Registered by op name in the one
table of lowerings (``LOWERINGS.register_fused``), which ``lower_ir`` reads."""

from __future__ import annotations

from flowserve.ir.passes.attention import MULTI_HEAD_ATTENTION
from flowserve.ir.passes.batch_norm_grad import FUSED_OP as BATCH_NORM_BACKWARD
from flowserve.ir.passes.fuse_add_to_output import FUSED_OP as ADD_TO_OUTPUT
from flowserve.onnx_backend.lowering.attention import lower_ort_multi_head_attention
from flowserve.onnx_backend.lowering.norm import lower_batch_norm_backward
from flowserve.onnx_backend.lowering.registry import LOWERINGS


def lower_add_to_output(b, node, ctx) -> None:
    b.op("Gemm", node.inputs, node.outputs)


LOWERINGS.register_fused(ADD_TO_OUTPUT, lower_add_to_output)
LOWERINGS.register_fused(MULTI_HEAD_ATTENTION, lower_ort_multi_head_attention)
LOWERINGS.register_fused(BATCH_NORM_BACKWARD, lower_batch_norm_backward)
