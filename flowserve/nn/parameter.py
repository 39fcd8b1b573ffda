"""``nn.Parameter``: a tensor that a Module registers as a trainable weight."""

from __future__ import annotations

from flowserve.ops.creation import empty, tensor
from flowserve.tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor that ``Module.__setattr__`` registers; shares ``data``'s memory."""

    __slots__ = ()

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:

            data = empty(0)
        if not isinstance(data, Tensor):

            data = tensor(data)
        self._set(data._data, data._lazy, data._device)
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
