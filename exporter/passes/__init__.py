"""Exporter passes: rewrite an inference IR before it is lowered to ONNX.

Each pass is one file with one job. A pass takes an ``ExportGraph`` (the IR, the arrays
that will become initializers, the fused groups formed so far; ``export_graph.py``) and
returns ``PassResult(g, modified)``. They run in ``EXPORT_PASSES``, the core's one pass
runner (``flowserve.ir.passes.manager.PassManager``), and ``g.applied`` names the ones
that changed the graph.

>>> g = ExportGraph.of(ir, arrays)          # doctest: +SKIP
>>> run_passes(g)                            # doctest: +SKIP
>>> [grp.kind for grp in g.groups]           # doctest: +SKIP
['Gemm', 'Gemm']

The order: constant folding runs first (eval-mode BatchNorm's statistics become
per-channel constants) but keeps transposes of parameters, so that the Gemm pass can
absorb them and initializers keep their ``state_dict`` names; activations are matched
before the conv and matmul passes so that those can absorb them; a last folding pass
takes what is left. The context of a run is whether it fuses (``fuse``).
"""

from __future__ import annotations

from flowserve.exporter.passes.activations import fuse_gelu, fuse_silu
from flowserve.exporter.passes.attention import fuse_attention
from flowserve.exporter.passes.constant_folding import fold_constants, fold_constants_early
from flowserve.exporter.passes.conv_bn import fuse_conv
from flowserve.exporter.passes.export_graph import FUSED_PREFIX, ExportGraph, FusedGroup, fused_node
from flowserve.exporter.passes.gemm import fuse_gemm
from flowserve.exporter.passes.layernorm import fuse_layernorm
from flowserve.ir.passes.manager import Pass, PassManager

__all__ = ["EXPORT_PASSES", "FUSED_PREFIX", "ExportGraph", "FusedGroup", "fused_node", "run_passes"]


def _fusion(name: str, fn) -> Pass:
    return Pass(name, lambda g, fuse: fn(g), when=lambda fuse: fuse)


def _always(name: str, fn) -> Pass:
    return Pass(name, lambda g, fuse: fn(g))


EXPORT_PASSES = PassManager([
    _always("constant_folding", fold_constants_early),
    _fusion("layernorm", fuse_layernorm),
    _fusion("gelu", fuse_gelu),
    _fusion("silu", fuse_silu),
    _fusion("attention", fuse_attention),
    _fusion("conv", fuse_conv),
    _fusion("gemm", fuse_gemm),
    _always("constant_folding_rest", fold_constants),
])


def run_passes(g: ExportGraph, *, fuse: bool = True) -> ExportGraph:
    """Constant folding, then the fusion passes in order (most specific first); records in
    ``g.applied`` the passes that changed the graph."""
    g.refresh()
    result, applied = EXPORT_PASSES.run(g, fuse)
    g = result.ir
    g.applied = applied
    g.prune()
    return g
