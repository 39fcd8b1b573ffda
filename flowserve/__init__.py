"""flowserve: OneFlow's programming model, with static graphs as a deployment format.

>>> import flowserve as flow
>>> x = flow.randn(2, 3)
>>> flow.matmul(x, flow.ones(3, 1)).shape
flowserve.Size([2, 1])
"""

__version__ = "0.1.0"

from flowserve import dtypes as _dtypes
from flowserve.autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from flowserve.device import cuda, device
from flowserve.dtypes import dtype
from flowserve.tensor import Size, Tensor
from flowserve.ops.functional import *  # noqa: F401,F403
from flowserve.ops.creation import (
    Generator,
    arange,
    empty,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from flowserve.ops.creation import empty_like, randint_like  # noqa: E402
from flowserve.ops.functional_math import all_ as all, any_ as any, max_ as max, min_ as min  # noqa: E402,A001
from flowserve.ops.functional_math import is_tensor, numel  # noqa: E402
from flowserve import autograd, nn, optim  # noqa: E402
from flowserve import amp  # noqa: E402
from flowserve import utils  # noqa: E402,F401 - flow.utils.data loads on first use
from flowserve.serialization import load, save  # noqa: E402

bool = _dtypes.bool_  # noqa: A001 - the public name is flowserve.bool
uint8, int8, int16, int32, int64 = _dtypes.uint8, _dtypes.int8, _dtypes.int16, _dtypes.int32, _dtypes.int64
float16, bfloat16, float32, float64 = _dtypes.float16, _dtypes.bfloat16, _dtypes.float32, _dtypes.float64
half, float, double, long, int = float16, float32, float64, int64, int32  # noqa: A001
