"""``nn.parallel.DataParallel``: the single-process wrapper of PyTorch's API."""

from __future__ import annotations

from flowserve.device import as_device
from flowserve.nn.module import Module


class DataParallel(Module):
    """Runs ``module`` in this process, on its one device; ``state_dict`` keys carry the
    ``module.`` prefix as PyTorch's. Several devices or processes train with
    ``DistributedDataParallel``, one process per device.

    >>> import flowserve as flow
    >>> model = flow.nn.parallel.DataParallel(flow.nn.Linear(3, 2))
    >>> model(flow.ones(4, 3)).shape, list(model.state_dict())
    (flowserve.Size([4, 2]), ['module.weight', 'module.bias'])
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel expects an nn.Module, got {type(module).__name__}")
        ids = [] if device_ids is None else list(device_ids)
        if len(ids) > 1:
            raise ValueError(f"DataParallel runs in one process on one device, got device_ids={ids}; for "
                             "several devices start one process per device (python -m "
                             "flowserve.distributed.launch) and wrap the model in DistributedDataParallel")
        self.module = module
        object.__setattr__(self, "device_ids", ids)
        object.__setattr__(self, "output_device", None if output_device is None else as_device(output_device))
        object.__setattr__(self, "dim", dim)

    def forward(self, *args, **kwargs):
        out = self.module(*args, **kwargs)
        if self.output_device is not None and hasattr(out, "to"):
            return out.to(self.output_device)
        return out
