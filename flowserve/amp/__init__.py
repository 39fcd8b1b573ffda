"""``flowserve.amp``: loss scaling for mixed-precision training (eager and nn.Graph)."""

from flowserve.amp.grad_scaler import GradScaler, StaticGradScaler  # noqa: F401
