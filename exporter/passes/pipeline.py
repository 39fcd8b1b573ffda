"""The exporter's pass order: (name, pass, is a fusion).

Constant folding runs first (eval-mode BatchNorm's statistics become per-channel
constants) but keeps transposes of parameters, so that the Gemm pass can absorb them and
initializers keep their ``state_dict`` names; activations are matched before the conv and
matmul passes so that those can absorb them; a last folding pass takes what is left.
"""

from __future__ import annotations

from flowserve.exporter.passes.activations import fuse_gelu, fuse_silu
from flowserve.exporter.passes.attention import fuse_attention
from flowserve.exporter.passes.constant_folding import fold_constants, fold_constants_early
from flowserve.exporter.passes.conv_bn import fuse_conv
from flowserve.exporter.passes.gemm import fuse_gemm
from flowserve.exporter.passes.layernorm import fuse_layernorm

PIPELINE = [
    ("constant_folding", fold_constants_early, False),
    ("layernorm", fuse_layernorm, True),
    ("gelu", fuse_gelu, True),
    ("silu", fuse_silu, True),
    ("attention", fuse_attention, True),
    ("conv", fuse_conv, True),
    ("gemm", fuse_gemm, True),
    ("constant_folding_rest", fold_constants, False),
]
