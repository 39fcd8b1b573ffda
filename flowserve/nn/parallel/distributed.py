"""``nn.parallel.DistributedDataParallel``: one replica of a module per process.

At wrap, rank 0's parameters and buffers are broadcast to every rank. Each ``backward()``
after a forward through the wrapper ends with the gradients averaged over the ranks, in
buckets (``bucket_cap_mb``) that are all in flight on the engine's threads before the
first is waited for; inside ``no_sync()`` the gradients only accumulate locally, and the
next synchronised backward averages the sum.
Buffers (BatchNorm's running statistics) are broadcast from rank 0 before each forward,
as PyTorch does; ``nn.SyncBatchNorm`` computes batch statistics over all ranks.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from flowserve import env
from flowserve.autograd.engine import queue_backward_hooks
from flowserve.device import to_device_array
from flowserve.dispatch import current_trace
from flowserve.autograd.grad_mode import is_grad_enabled
from flowserve.distributed.buckets import DEFAULT_BUCKET_CAP_MB, GradientReducer
from flowserve.nn.module import Module
from flowserve.tensor import Tensor


def broadcast_tensors(comm, tensors: list, src: int = 0) -> None:
    """Overwrite every tensor's data with rank ``src``'s."""
    for t in tensors:
        data = np.array(t.numpy(), copy=True, order="C")
        comm.broadcast(data, src)
        t._set_value(to_device_array(data, t.device))  # its detach() aliases too


class DistributedDataParallel(Module):
    """Data parallelism over the processes of ``flow.env`` (``python -m
    flowserve.distributed.launch``); a world of one process trains as the bare module.

    >>> import flowserve as flow
    >>> model = flow.nn.parallel.DistributedDataParallel(flow.nn.Linear(3, 1))
    >>> model(flow.ones(2, 3)).sum().backward()
    >>> tuple(model.module.weight.grad.shape)
    (1, 3)
    """

    def __init__(self, module: Module, *, broadcast_buffers: bool = True,
                 bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB, communicator=None):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel expects an nn.Module, got {type(module).__name__}")
        if bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb!r}")
        self.module = module
        object.__setattr__(self, "_comm", communicator or env.communicator())
        object.__setattr__(self, "_sync", True)
        object.__setattr__(self, "_cap_bytes", int(bucket_cap_mb * (1 << 20)))
        object.__setattr__(self, "broadcast_buffers", broadcast_buffers)
        params = [p for p in module.parameters() if p.requires_grad]
        object.__setattr__(self, "_reducer", GradientReducer(self._comm, params, self._cap_bytes, _set_grad))
        if self._comm.world_size > 1:
            broadcast_tensors(self._comm, list(module.parameters()) + list(module.buffers()))

    @property
    def world_size(self) -> int:
        return self._comm.world_size

    def forward(self, *args, **kwargs):
        if self._comm.world_size > 1 and self.broadcast_buffers and self.training:
            broadcast_tensors(self._comm, list(self.module.buffers()))
        if self._sync and is_grad_enabled() and self._comm.world_size > 1 and current_trace() is None:
            queue_backward_hooks(self._reducer)  # (an nn.Graph reduces in its own step)
        return self.module(*args, **kwargs)

    @contextmanager
    def no_sync(self):
        """Backward passes inside this block accumulate gradients without averaging them."""
        object.__setattr__(self, "_sync", False)
        try:
            yield
        finally:
            object.__setattr__(self, "_sync", True)


def _set_grad(p, mean: np.ndarray) -> None:
    p.grad = Tensor._wrap(np.array(mean, copy=True), p.device)
