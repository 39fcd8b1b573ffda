"""The symbolic batch size of a traced graph.

While ``nn.Graph.build`` is traced, dim 0 of the graph's inputs (when they share it) is a
``BatchDim``: an ``int`` equal to the traced batch size, so every shape rule and every
user computation works as before, that also marks "this is the batch". Shape rules that
pass dims through keep the mark (``x.shape[0]``, ``B, T, C = x.size()``), and an op whose
attribute holds one (``expand(x.shape[0], -1, -1)``, ``view(B, T, C)``,
``zeros(x.shape[0], 4)``, ``repeat(B, 1, 1)``) records where, so its ONNX lowering reads
the batch size at run time instead of baking the traced one in.

Arithmetic gives plain ints (``B * T`` is no longer the batch), except multiplying or
floor-dividing by 1.

>>> b = BatchDim(4)
>>> b == 4, isinstance(b * 1, BatchDim), isinstance(b * 2, BatchDim)
(True, True, False)
"""

from __future__ import annotations


class BatchDim(int):
    """The batch size inside a traced build: an ``int`` that knows it is the batch."""

    def __new__(cls, value: int) -> "BatchDim":
        return super().__new__(cls, int(value))

    def __mul__(self, other):
        return self if type(other) is int and other == 1 else int(self) * other

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return self if type(other) is int and other == 1 else int(self) // other

    def __repr__(self) -> str:
        return int.__repr__(self)

    def __reduce__(self):
        return (BatchDim, (int(self),))


def as_dim(d):
    """A size argument as a dim: ``BatchDim`` kept, anything else through ``int()``."""
    return d if isinstance(d, BatchDim) else int(d)


def batch_positions(attrs: dict) -> dict:
    """Attribute name -> positions holding a ``BatchDim``, for list/tuple attributes."""
    found = {}
    for key, value in attrs.items():
        if isinstance(value, (list, tuple)):
            positions = [i for i, d in enumerate(value) if isinstance(d, BatchDim)]
            if positions:
                found[key] = positions
    return found


def same_shape(shape, target) -> bool:
    """Whether reshaping/expanding ``shape`` to ``target`` is a no-op at every batch size:
    equal, and no position of ``target`` is the batch where ``shape``'s is a plain int
    (at batch size 1, ``expand(x.shape[0], -1)`` of a ``(1, n)`` tensor is still an op)."""
    return list(shape) == list(target) and all(
        isinstance(a, BatchDim) or not isinstance(b, BatchDim) for a, b in zip(shape, target))
