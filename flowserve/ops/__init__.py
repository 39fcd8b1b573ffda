"""flowserve's ops: the primitive registry and the functions built on it.

Importing this package declares every primitive (one file per family).
"""

from flowserve.ops import elementwise, nn, reduce, shape  # noqa: F401  (declare the primitives)
from flowserve.ops import indexing, math, sorting  # noqa: F401  (tensor-op primitives)
from flowserve.ops import conv, dropout, pool  # noqa: F401  (nn primitives)
from flowserve.ops.functional import *  # noqa: F401,F403
from flowserve.ops.functional import __dict__ as _functional
from flowserve.ops.registry import REGISTRY, Meta, Primitive, bind  # noqa: F401
from flowserve.ops import methods as _methods  # noqa: E402
from flowserve.tensor import Tensor as _Tensor  # noqa: E402

_methods.install(_Tensor)

__all__ = [name for name in _functional if not name.startswith("_")]
