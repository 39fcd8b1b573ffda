"""ONNX lowerings, one module per op family (mirroring ``flowserve.ops``), plus graph mode's
fused nodes (``graph_mode``): importing the package fills the one table, ``LOWERINGS``."""

from flowserve.onnx_backend.lowering import elementwise, nn, reduce, shape  # noqa: F401
from flowserve.onnx_backend.lowering import indexing, math, sorting  # noqa: F401  (tensor ops)
from flowserve.onnx_backend.lowering import conv, norm, pool, random, rnn  # noqa: F401  (nn, random, recurrent ops)
from flowserve.onnx_backend.lowering import collective  # noqa: F401  (one-process collectives)
from flowserve.onnx_backend.lowering import fake_quant  # noqa: F401  (quantization-aware training)
from flowserve.onnx_backend.lowering import graph_mode  # noqa: F401  (graph mode's fused nodes)
from flowserve.onnx_backend.lowering.registry import LOWERINGS, LoweringContext, lowering  # noqa: F401
