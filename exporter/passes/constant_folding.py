"""Constant folding: a node whose inputs are all constants becomes a constant.

Runs the registry kernel (``flowserve.ir.interpreter``) once at export. Eval-mode
BatchNorm's ``rsqrt(running_var + eps) * weight`` becomes one per-channel constant here,
which the conv pass then folds into the convolution. Skipped: nodes
that would grow the model (an output larger than its largest input, such as ``expand``),
fused nodes, nodes with no inputs (nothing to fold), random draws (fresh per call) and
fake quantization (its lowering stores a constant's integers for ONNX Runtime's QDQ kernels).
"""

from __future__ import annotations

import numpy as np

from flowserve.exporter.passes.export_graph import FUSED_PREFIX, ExportGraph
from flowserve.ir.graph import PassResult
from flowserve.ir.interpreter import run_node
from flowserve.ops.fake_quant import QUANTIZE_PRIMITIVES
from flowserve.ops.random import RANDOM_PRIMITIVES


def _foldable(g: ExportGraph, node, keep_layout: bool) -> bool:
    if (node.op.startswith(FUSED_PREFIX) or not node.inputs or node.op in RANDOM_PRIMITIVES
            or node.op in QUANTIZE_PRIMITIVES):
        return False
    if keep_layout and node.op == "permute" and g.ir.state_kinds.get(node.inputs[0]) == "parameter":
        return False
    if not all(g.is_const(name) for name in node.inputs):
        return False
    if any(name in g.output_names for name in node.outputs):
        return False
    biggest = max(int(np.prod(g.ir.values[name].shape)) for name in node.inputs)
    return all(int(np.prod(g.ir.values[o].shape)) <= max(biggest, 1) for o in node.outputs)


def fold_constants_early(g: ExportGraph) -> PassResult:
    """Fold before fusion, but keep transposes of parameters for the Gemm pass to absorb
    (so the initializer keeps the parameter's ``state_dict`` name)."""
    return fold_constants(g, keep_layout=True)


def fold_constants(g: ExportGraph, keep_layout: bool = False) -> PassResult:
    folded = []
    for node in g.ir.nodes:
        if not _foldable(g, node, keep_layout):
            continue
        env = {name: g.consts[name] for name in node.inputs}
        run_node(g.ir, node, env)
        for name in node.outputs:
            g.add_const(name, np.ascontiguousarray(env[name]))
        folded.append(node)
    if folded:
        dropped = {id(n) for n in folded}
        g.ir.nodes = [n for n in g.ir.nodes if id(n) not in dropped]
        g.folded += len(folded)
        g.refresh()
    return PassResult(g, bool(folded))
