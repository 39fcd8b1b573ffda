"""ONNX lowerings, one module per op family (mirroring ``flowserve.ops``)."""

from flowserve.exporter.lowering import elementwise, nn, reduce, shape  # noqa: F401
from flowserve.exporter.lowering import indexing, math, sorting  # noqa: F401  (tensor ops)
from flowserve.exporter.lowering import conv, norm, pool, random, rnn  # noqa: F401  (nn, random, recurrent ops)
from flowserve.exporter.lowering import collective  # noqa: F401  (one-process collectives)
from flowserve.exporter.lowering import fake_quant  # noqa: F401  (quantization-aware training)
from flowserve.exporter.lowering.registry import LOWERINGS, LoweringContext, lowering  # noqa: F401
