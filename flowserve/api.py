"""The public surface: every name of ``flowserve.*`` (``flow.tensor``, ``flow.add``,
``flow.nn``, ``flow.save``, ...), imported explicitly. ``flowserve/__init__.py`` loads this
module on the first attribute access, so ``import flowserve.clients`` loads no core.

>>> import flowserve as flow
>>> x = flow.randn(2, 3)
>>> flow.matmul(x, flow.ones(3, 1)).shape
flowserve.Size([2, 1])
"""

from flowserve import dtypes as _dtypes
from flowserve.autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from flowserve.device import cuda as _device_cuda
from flowserve.device import device
from flowserve.dtypes import dtype
from flowserve.tensor import Size, Tensor
from flowserve import ops as _ops  # noqa: F401  (Tensor inherits the op method groups)
from flowserve.ops.functional import *  # noqa: F401,F403  (its __all__ is an explicit list)
from flowserve.ops.functional import __all__ as _functional_names
from flowserve.ops.creation import (  # every creation function: eager, nn.Graph tracing, placement=/sbp=
    Generator, arange, empty, empty_like, eye, from_numpy, full, full_like, linspace, manual_seed, normal, ones,
    ones_like, rand, rand_like, randint, randint_like, randn, randn_like, randperm, tensor, zeros, zeros_like,
)
from flowserve.ops.functional import all_ as all, any_ as any, max_ as max, min_ as min  # noqa: E402,A001
from flowserve.ops.autocast_policy import bmm, einsum, matmul, mm  # noqa: E402 - under flow.autocast: float16/bfloat16
from flowserve import autograd, nn, optim  # noqa: E402
from flowserve import amp  # noqa: E402
from flowserve import utils  # noqa: E402,F401 - flow.utils.data loads on first use
from flowserve.serialization import load, save  # noqa: E402
from flowserve.ops.random import bernoulli, multinomial  # noqa: E402
from flowserve.ops.special_functions import erfinv  # noqa: E402
from flowserve.amp import autocast  # noqa: E402 - torch.autocast's spelling
from flowserve.amp.autocast import cuda_amp as _cuda_amp  # noqa: E402


class cuda(_device_cuda):  # noqa: N801 - the public name is flow.cuda
    """``flow.cuda``: device queries, and PyTorch's ``manual_seed``/``manual_seed_all`` (one
    generator for every device: they seed it, as ``flow.manual_seed``) and ``amp``."""

    manual_seed = staticmethod(manual_seed)
    manual_seed_all = staticmethod(manual_seed)
    amp = _cuda_amp
from flowserve import backends  # noqa: E402,F401 - torch.backends' queries and switches
from flowserve.backends import (  # noqa: E402 - torch's spellings of the determinism switch
    are_deterministic_algorithms_enabled, is_deterministic_algorithms_warn_only_enabled,
    use_deterministic_algorithms)
from flowserve.nn.graph.compile import compile  # noqa: E402,A001 - torch.compile's spelling
from flowserve.distributed import sbp  # noqa: E402 - OneFlow's flow.sbp.split(0), .broadcast, .partial_sum
from flowserve.distributed.sbp import placement  # noqa: E402 - flow.placement("cpu", ranks=[0, 1])
from flowserve.distributed import global_tensor as _global  # noqa: E402,F401 - Tensor.to_global / to_local

bool = _dtypes.bool_  # noqa: A001 - the public name is flowserve.bool
uint8, int8, int16, int32, int64 = _dtypes.uint8, _dtypes.int8, _dtypes.int16, _dtypes.int32, _dtypes.int64
float16, bfloat16, float32, float64 = _dtypes.float16, _dtypes.bfloat16, _dtypes.float32, _dtypes.float64
half, float, double, long, int = float16, float32, float64, int64, int32  # noqa: A001

__all__ = _functional_names + [
    "Generator", "Size", "Tensor", "amp", "arange", "autograd", "bfloat16", "bool", "cuda", "device", "double",
    "dtype", "empty", "empty_like", "enable_grad", "eye", "float", "float16", "float32", "float64", "from_numpy",
    "full", "full_like", "half", "inference_mode", "int", "int8", "int16", "int32", "int64", "is_grad_enabled",
    "linspace", "load", "long", "manual_seed", "max", "min", "all", "any", "nn", "no_grad", "ones", "ones_like",
    "optim", "rand", "rand_like", "randint", "randint_like", "randn", "randn_like", "randperm", "save",
    "set_grad_enabled", "tensor", "uint8", "utils", "zeros", "zeros_like",
    "autocast", "backends", "bernoulli", "compile", "erfinv", "multinomial", "normal", "placement", "sbp",
    "use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
    "is_deterministic_algorithms_warn_only_enabled",
]
