"""flowserve's ops: the primitive registry, the op functions built on it, and ``Tensor``'s
method groups.

Importing this package declares every primitive (one module per family) and makes the method
groups of ``flowserve.ops.tensor_methods`` bases of ``Tensor``. The op functions are in the
explicit namespace ``flowserve.ops.functional``.
"""

from flowserve.ops import elementwise, nn, reduce, shape  # noqa: F401  (declare the primitives)
from flowserve.ops import indexing, math, sorting  # noqa: F401  (tensor-op primitives)
from flowserve.ops import batch_norm, conv, dropout, layer_norm, pool, random, rnn  # noqa: F401  (nn, random, recurrent primitives)
from flowserve.ops import collective  # noqa: F401  (collectives of distributed runs)
from flowserve.ops import fake_quant  # noqa: F401  (quantization-aware training)
from flowserve.ops import functional, tensor_methods
from flowserve.ops.registry import REGISTRY, Meta, Primitive, bind
from flowserve.tensor import Tensor, inherit_methods

inherit_methods(Tensor, *tensor_methods.GROUPS)

__all__ = ["REGISTRY", "Meta", "Primitive", "bind", "functional", "tensor_methods"]
