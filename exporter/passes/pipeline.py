"""The exporter's pass order: (name, pass, is a fusion). Activations are matched first so
that the matmul and conv passes can absorb them; constant folding runs last, so that the
weights the fusions keep are still the state_dict's named parameters."""

from __future__ import annotations

from flowserve.exporter.passes.activations import fuse_gelu, fuse_silu
from flowserve.exporter.passes.constant_folding import fold_constants
from flowserve.exporter.passes.gemm import fuse_gemm

PIPELINE = [
    ("gelu", fuse_gelu, True),
    ("silu", fuse_silu, True),
    ("gemm", fuse_gemm, True),
    ("constant_folding", fold_constants, False),
]
