"""PyTorch functions that are short composites of the registry's ops (no kernels or lowerings
of their own, so eager mode, tracing, autodiff and export need nothing more): ``divide``,
``diff``, ``meshgrid``.

>>> import flowserve as flow
>>> flow.diff(flow.tensor([1.0, 4.0, 9.0, 16.0])).tolist()
[3.0, 5.0, 7.0]
>>> [g.tolist() for g in flow.meshgrid(flow.tensor([1, 2]), flow.tensor([3, 4, 5]), indexing="ij")]
[[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]
"""

from __future__ import annotations

from flowserve.ops import basic
from flowserve.ops import functional_index as FI
from flowserve.ops import functional_math as FM
from flowserve.ops.registry import fail_shape

divide = FM.div  # torch.divide(a, b, rounding_mode=None | "trunc" | "floor"): div's other name


def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None):  # noqa: A002
    """The ``n``-th forward difference along ``dim``: ``out[i] = x[i + 1] - x[i]``, after
    ``prepend``/``append`` are joined on (``torch.diff``); booleans differ by ``!=``."""
    if n < 0:
        raise ValueError(f"diff expected order n >= 0, got {n}")
    if input.ndim == 0:
        fail_shape("diff", "an input of at least 1 dimension", tuple(input.shape))
    dim = dim % input.ndim
    pieces = [p for p in (prepend, input, append) if p is not None]
    if any(p.ndim != input.ndim for p in pieces):
        fail_shape("diff", f"prepend/append with the same number of dimensions as the input ({input.ndim})",
                   tuple(next(p.shape for p in pieces if p.ndim != input.ndim)))
    x = basic.cat(pieces, dim) if len(pieces) > 1 else input
    for _ in range(n):
        length = x.shape[dim] - 1
        if length <= 0:
            return FI.narrow(x, dim, 0, 0)
        after, before = FI.narrow(x, dim, 1, length), FI.narrow(x, dim, 0, length)
        x = basic.ne(after, before) if x.dtype.name == "bool" else basic.sub(after, before)
    return x


def _with(shape, dim: int, size: int) -> tuple:
    return tuple(size if i == dim else s for i, s in enumerate(shape))


def meshgrid(*tensors, indexing: str = "ij"):
    """Coordinate grids from 1-d tensors (``torch.meshgrid``): with ``indexing="ij"`` grid ``i``
    varies along dimension ``i``; ``"xy"`` swaps the first two (NumPy's/MATLAB's layout)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid expected indexing 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        if t.ndim > 1:
            fail_shape("meshgrid", "0-d or 1-d tensors", tuple(t.shape))
    flat = [basic.reshape(t, (-1,)) for t in tensors]
    swap = indexing == "xy" and len(flat) >= 2
    order = [1, 0] + list(range(2, len(flat))) if swap else list(range(len(flat)))
    shape = tuple(flat[i].shape[0] for i in order)
    ones = (1,) * len(flat)
    return tuple(basic.expand(basic.reshape(t, _with(ones, order.index(k), -1)), shape) for k, t in enumerate(flat))


__all__ = ["divide", "diff", "meshgrid"]
