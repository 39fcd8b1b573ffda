"""The op functions users call (``flow.add``, ``flow.sum``, ``flow.gather``, ...), in one
explicit namespace: each name below is defined in one op family module and re-exported
here. ``flowserve`` re-exports ``__all__`` as ``flow.*``; ``Tensor`` methods are the mixin
classes of ``flowserve.ops.tensor_methods``.

>>> import flowserve as flow
>>> from flowserve.ops import functional
>>> functional.add(flow.ones(2), 1).tolist()
[2.0, 2.0]
"""

from flowserve.ops.core_functions import (  # noqa: F401  (arithmetic, shapes, reductions, softmax)
    cast, add, sub, mul, pow, neg, maximum, minimum, clamp, clip, exp, log, sqrt, rsqrt, tanh,
    sigmoid, relu, abs, sign, square, eq, ne, lt, le, gt, ge, logical_not, sum, mean, amax, amin,
    argmax, argmin, reshape, view, flatten, unsqueeze, squeeze, permute, transpose, t, expand,
    broadcast_to, cat, concat, stack, matmul, mm, log_softmax, softmax, one_hot, clone,
)
from flowserve.ops.core_functions import (  # noqa: F401  (building blocks of flowserve's own modules)
    as_tensor, coerce, scalar_tensor, slice_axis, sum_to, to_device,
)
from flowserve.ops.indexing_functions import (  # noqa: F401  (indexing, selection, ordering)
    ValuesIndices, getitem, where, gather, take_along_dim, scatter, scatter_add, index_select,
    index_add, index_copy, index_fill, masked_fill, masked_select, nonzero, argwhere, narrow,
    split, chunk, tensor_split, unbind, repeat, tile, flip, roll, tril, triu, topk, sort, argsort,
    msort, cumsum,
)
from flowserve.ops.indexing_functions import max_with_indices, min_with_indices, setitem  # noqa: F401
from flowserve.ops.math_functions import (  # noqa: F401  (math beyond arithmetic, statistics)
    sin, cos, tan, erf, erfc, expm1, log1p, log2, log10, exp2, reciprocal, floor, ceil, round,
    trunc, fix, frac, fmod, remainder, floor_divide, div, true_divide, isnan, isinf, isfinite,
    logical_and, logical_or, logical_xor, bitwise_and, bitwise_or, bitwise_xor, bitwise_not, var,
    std, var_mean, std_mean, prod, logsumexp, norm, bmm, dot, outer, einsum, isclose, allclose,
    equal, is_tensor, numel,
)
from flowserve.ops.math_functions import all_, any_, max_, min_  # noqa: F401  (flow.all, ...)
from flowserve.ops.composite_functions import *  # noqa: F401,F403  (composites; an explicit __all__)
from flowserve.ops.composite_functions import __all__ as _compose_names

__all__ = [
    "cast", "add", "sub", "mul", "pow", "neg", "maximum", "minimum", "clamp", "clip", "exp",
    "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "sign", "square", "eq", "ne", "lt",
    "le", "gt", "ge", "logical_not", "sum", "mean", "amax", "amin", "argmax", "argmin", "reshape",
    "view", "flatten", "unsqueeze", "squeeze", "permute", "transpose", "t", "expand",
    "broadcast_to", "cat", "concat", "stack", "matmul", "mm", "log_softmax", "softmax", "one_hot",
    "clone", "ValuesIndices", "getitem", "where", "gather", "take_along_dim", "scatter",
    "scatter_add", "index_select", "index_add", "index_copy", "index_fill", "masked_fill",
    "masked_select", "nonzero", "argwhere", "narrow", "split", "chunk", "tensor_split", "unbind",
    "repeat", "tile", "flip", "roll", "tril", "triu", "topk", "sort", "argsort", "msort",
    "cumsum", "sin", "cos", "tan", "erf", "erfc", "expm1", "log1p", "log2", "log10", "exp2",
    "reciprocal", "floor", "ceil", "round", "trunc", "fix", "frac", "fmod", "remainder",
    "floor_divide", "div", "true_divide", "isnan", "isinf", "isfinite", "logical_and",
    "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "var",
    "std", "var_mean", "std_mean", "prod", "logsumexp", "norm", "bmm", "dot", "outer", "einsum",
    "isclose", "allclose", "equal", "is_tensor", "numel",
] + _compose_names
