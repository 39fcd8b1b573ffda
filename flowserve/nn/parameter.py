"""``nn.Parameter``: a tensor that a Module registers as a trainable weight; a global one
(``GlobalParameter``) after ``param.to_global(...)`` or ``module.to_global(...)``."""

from __future__ import annotations

from flowserve.dispatch import current_trace
from flowserve.distributed.global_tensor import GlobalTensor
from flowserve.ops.creation import empty, tensor
from flowserve.tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor that ``Module.__setattr__`` registers; shares ``data``'s memory. Made
    inside ``nn.Graph.build``, it is a leaf of the graph holding ``data``'s traced value:
    as eagerly, where each call makes a new one, ``backward()`` gives it that call's gradient."""

    __slots__ = ()

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:

            data = empty(0)
        if not isinstance(data, Tensor):

            data = tensor(data)
        if data.is_global:
            raise TypeError("nn.Parameter of a global tensor: convert the parameter instead, "
                            "nn.Parameter(local).to_global(placement=..., sbp=...), or the module with "
                            "module.to_global(placement=..., sbp=...)")
        trace = current_trace()
        if trace is not None:
            data = trace.lift(data)
        self._set(data._data, data._lazy, data._device)
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class GlobalParameter(GlobalTensor, Parameter):
    """A Parameter spread over the ranks (OneFlow's global parameter): a leaf global tensor
    whose gradient has its sbp (``isinstance(p, nn.Parameter)`` holds)."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        raise TypeError("a global Parameter comes from param.to_global(placement=..., sbp=...) or "
                        "module.to_global(placement=..., sbp=...)")

    def __repr__(self) -> str:
        return "Parameter containing:\n" + GlobalTensor.__repr__(self)


Parameter._global_class = GlobalParameter  # what to_global makes of a Parameter
GlobalParameter._global_class = GlobalParameter
