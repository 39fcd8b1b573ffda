"""``flow._C``: OneFlow's functional namespace (``oneflow._C``), over the one op registry.

OneFlow's own model code calls these by name (its ResNet-50 training smooths labels with
``flow._C.one_hot(label, num_classes, on_value, off_value)`` and
``flow._C.softmax_cross_entropy``). Each name
is the flowserve function of the same meaning: most are ``flow.nn.functional``'s or ``flow``'s
own function, unchanged; the few whose OneFlow signature differs (``one_hot``'s on/off values,
``matmul``'s transposes, the softmax cross entropies, ``bias_add``) are short composites of
them, so eager mode, ``nn.Graph`` tracing, autodiff and export need nothing more.
``_log_api_usage_once`` is the no-op that torchvision calls in every model's ``__init__``.

>>> import flowserve as flow
>>> flow._C.one_hot(flow.tensor([0, 2]), 3, 0.9, 0.05).tolist()
[[0.8999999761581421, 0.05000000074505806, 0.05000000074505806], [0.05000000074505806, 0.05000000074505806, 0.8999999761581421]]
"""

from __future__ import annotations

from flowserve import api as _flow
from flowserve import dtypes as _dtypes
from flowserve._missing import module_getattr as _module_getattr
from flowserve.nn import functional as _nn_functional

_FROM_FUNCTIONAL = (
    "adaptive_avg_pool2d", "adaptive_avg_pool3d", "avg_pool2d", "batch_norm",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "celu", "conv1d", "conv2d", "conv3d", "depend",
    "conv_transpose1d", "conv_transpose2d", "cross_entropy", "dropout", "elu", "embedding", "gelu", "glu",
    "group_norm", "hardsigmoid", "hardswish", "hardtanh", "instance_norm", "interpolate", "kl_div", "l1_loss",
    "layer_norm", "leaky_relu", "linear", "log_softmax", "logsigmoid", "max_pool1d", "max_pool2d", "max_pool3d",
    "mish", "mse_loss", "nll_loss", "normalize", "pad", "pixel_shuffle", "relu", "relu6", "rrelu",
    "scaled_dot_product_attention",
    "selu", "silu", "smooth_l1_loss", "softmax", "softplus", "softsign", "unfold", "fold",
)
_FROM_FLOW = (
    "abs", "add", "amax", "amin", "arange", "argmax", "argmin", "bmm", "broadcast_to", "cat", "ceil", "chunk", "clamp",
    "clip", "concat", "cos", "cumsum", "div", "einsum", "eq", "erf", "exp", "expand", "expm1", "flatten", "flip",
    "floor", "fmod", "full", "full_like", "gather", "ge", "gt", "index_select", "le", "linspace", "log", "log1p",
    "logical_and", "logical_not", "logical_or", "logsumexp", "lt", "masked_fill", "masked_select", "max", "maximum",
    "mean", "min", "minimum", "mul", "narrow", "ne", "neg", "nonzero", "norm", "ones", "ones_like", "permute", "pow",
    "prod", "rand", "randint", "randn", "randperm", "reciprocal", "repeat", "reshape", "roll", "round", "rsqrt",
    "scatter", "sigmoid", "sign", "sin", "sort", "split", "sqrt", "square", "squeeze", "stack", "std", "sub", "sum",
    "tanh", "tile", "topk", "transpose", "tril", "triu", "unsqueeze", "var", "view", "where", "zeros", "zeros_like",
)
globals().update({name: getattr(_nn_functional, name) for name in _FROM_FUNCTIONAL})
globals().update({name: getattr(_flow, name) for name in _FROM_FLOW})


def one_hot(input, num_classes: int = -1, on_value=1, off_value=0):  # noqa: A002
    """OneFlow's ``one_hot``: ``on_value`` at each index, ``off_value`` elsewhere (int64 for
    integer values, float32 when either is a float, as OneFlow does)."""
    hot = _nn_functional.one_hot(input, num_classes)
    if isinstance(on_value, float) or isinstance(off_value, float):
        hot = hot.to(_dtypes.float32)
    if on_value == 1 and off_value == 0:
        return hot
    return hot * on_value + (1 - hot) * off_value  # exact: one term is 0


def softmax_cross_entropy(logits, label):
    """Per-sample cross entropy against a distribution ``label`` of ``logits``' shape: ``-(label *
    log_softmax(logits)).sum(-1)`` (OneFlow's; reduce it with ``.mean()``)."""
    return -(label * _nn_functional.log_softmax(logits, -1)).sum(-1)


def sparse_softmax_cross_entropy(logits, label):
    """Per-sample cross entropy against class indices ``label``: ``cross_entropy(..., reduction="none")``."""
    return _nn_functional.cross_entropy(logits, label, reduction="none")


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False, alpha: float = 1.0):
    """OneFlow's ``matmul(a, b, transpose_a, transpose_b, alpha)``: ``alpha * op(a) @ op(b)``,
    ``op`` transposing the last two dimensions where asked."""
    a = a.transpose(-2, -1) if transpose_a else a
    b = b.transpose(-2, -1) if transpose_b else b
    out = _flow.matmul(a, b)
    return out if alpha == 1.0 else out * alpha


def bias_add(input, bias, axis: int = 1):  # noqa: A002
    """``input + bias`` with the 1-d ``bias`` along dimension ``axis``."""
    axis = axis % input.ndim
    return input + bias.reshape([-1] + [1] * (input.ndim - axis - 1))


def identity(input):  # noqa: A002
    return input


def _log_api_usage_once(*_args, **_kwargs) -> None:
    """``torch._C._log_api_usage_once``: PyTorch's usage telemetry; flowserve logs nothing."""


__getattr__ = _module_getattr("flowserve._C")
