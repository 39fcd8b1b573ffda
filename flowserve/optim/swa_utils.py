"""``flowserve.optim.swa_utils``: PyTorch's helper for BatchNorm statistics.

``update_bn(loader, model)`` recomputes every BatchNorm's running mean and variance from
the batches of ``loader``, as ``torch.optim.swa_utils.update_bn`` does: the statistics are
reset, averaged over the batches with equal weight (``momentum=None``, the cumulative
average), and the model's mode and momenta are restored. Use it after averaging weights,
or before exporting a network trained only a few steps, whose running statistics are
still near their initial values, so that its eval-mode outputs (and what an int8
calibration sees) are those of the data::

    >>> import flowserve as flow
    >>> import flowserve.nn as nn
    >>> model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    >>> batches = [flow.randn(8, 3, 6, 6) + 5 for _ in range(2)]
    >>> flow.optim.swa_utils.update_bn(batches, model)
    >>> int(model[1].num_batches_tracked), model.training
    (2, True)
"""

from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

from flowserve.autograd.grad_mode import no_grad
from flowserve.nn.module import Module
from flowserve.nn.modules.normalization import _BatchNorm
from flowserve.ops import creation

__all__ = ["update_bn"]


@no_grad()
def update_bn(loader: Iterable, model: Module, device: Optional[object] = None) -> None:
    """Recompute the BatchNorm running statistics of ``model`` from ``loader``.

    ``loader`` yields input batches, or lists/tuples whose first element is the input (a
    ``DataLoader`` of ``(x, y)`` pairs); each is passed to ``model`` in training mode.
    ``device``: where each batch is moved first. Models without BatchNorm are left as
    they are; those whose BatchNorm does not track running statistics too, like PyTorch."""
    if not isinstance(model, Module):
        raise TypeError(f"update_bn(loader, model): model must be a flowserve nn.Module, got "
                        f"{type(model).__name__} (the arguments are (loader, model), as in PyTorch)")
    norms = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: every batch weighs the same
    was_training = model.training
    model.train()
    try:
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            if isinstance(batch, np.ndarray):
                batch = creation.tensor(batch)
            if device is not None:
                batch = batch.to(device)
            model(batch)
    finally:
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
        model.train(was_training)
