"""``flowserve.amp``: ``autocast`` and loss scaling for mixed-precision training (eager and nn.Graph)."""

from flowserve.amp.autocast import autocast, is_autocast_enabled  # noqa: F401
from flowserve.amp.grad_scaler import GradScaler, StaticGradScaler  # noqa: F401

from flowserve._missing import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("flowserve.amp")  # PyTorch/OneFlow names flowserve lacks: say what to use instead
