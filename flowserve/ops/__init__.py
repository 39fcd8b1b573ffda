"""flowserve's ops: the primitive registry, the op functions built on it, and the ``Tensor``
method table.

Importing this package declares every primitive (one module per family) and installs the
method table onto ``Tensor``. The op functions are in the explicit namespace
``flowserve.ops.functional``.
"""

from flowserve.ops import elementwise, nn, reduce, shape  # noqa: F401  (declare the primitives)
from flowserve.ops import indexing, math, sorting  # noqa: F401  (tensor-op primitives)
from flowserve.ops import batch_norm, conv, dropout, pool, random, rnn  # noqa: F401  (nn, random, recurrent primitives)
from flowserve.ops import collective  # noqa: F401  (collectives of distributed runs)
from flowserve.ops import fake_quant  # noqa: F401  (quantization-aware training)
from flowserve.ops import functional, methods
from flowserve.ops.registry import REGISTRY, Meta, Primitive, bind

methods.install(methods.Tensor)

__all__ = ["REGISTRY", "Meta", "Primitive", "bind", "functional", "methods"]
