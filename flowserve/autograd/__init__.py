"""Autograd: grad mode switches and the backward walk."""

from flowserve.autograd.engine import backward, grad  # noqa: F401
from flowserve.autograd.grad_mode import (  # noqa: F401
    enable_grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
