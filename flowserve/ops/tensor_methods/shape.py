"""``Tensor`` shape and view methods: ``reshape``, ``view``, ``permute``, ``x.T``, ``expand``,
``flatten``, ``stride()``, ..."""

from __future__ import annotations

from flowserve.ops import functional


def strides(t) -> tuple:
    """Element strides: the array's own for eager tensors, row-major for lazy ones."""
    if t._lazy is None and hasattr(t._data, "strides"):
        return tuple(s // t._data.itemsize for s in t._data.strides)
    out, step = [], 1
    for d in reversed(tuple(t.shape)):
        out.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(out))


class ShapeMethods:
    """Views and shape changes (the values stay, the size changes)."""

    __slots__ = ()

    reshape = view = functional.reshape
    flatten, ravel, unflatten = functional.flatten, functional.ravel, functional.unflatten
    unsqueeze, squeeze = functional.unsqueeze, functional.squeeze
    permute, movedim, moveaxis = functional.permute, functional.movedim, functional.moveaxis
    transpose = swapaxes = swapdims = functional.transpose
    t = functional.t
    expand, broadcast_to = functional.expand, functional.broadcast_to
    fliplr, flipud = functional.fliplr, functional.flipud

    def expand_as(self, other):
        return functional.expand(self, other.shape)

    def view_as(self, other):
        return functional.reshape(self, other.shape)

    def reshape_as(self, other):
        return functional.reshape(self, other.shape)

    @property
    def T(self):  # noqa: N802 - PyTorch's name
        return functional.permute(self, list(range(self.ndim))[::-1])

    @property
    def mT(self):  # noqa: N802
        return functional.transpose(self, -2, -1)

    def ndimension(self) -> int:
        return self.ndim

    def contiguous(self, memory_format=None):
        """This tensor where it is contiguous, else a C-ordered copy of it (``clone``), as in
        PyTorch and OneFlow. Lazy tensors (inside ``nn.Graph.build``) have no layout: ``self``."""
        return self if self.is_contiguous() else functional.clone(self)

    def stride(self, dim: int | None = None):
        return strides(self) if dim is None else strides(self)[dim]

    def is_contiguous(self, memory_format=None) -> bool:
        return self._lazy is not None or bool(
            getattr(self._data, "flags", None) is None or self._data.flags.c_contiguous)
