"""Loss scaling for mixed precision: ``GradScaler`` (dynamic) and ``StaticGradScaler``.

The same rules serve eager training and ``nn.Graph``: gradients are computed from the
loss multiplied by the scale, divided by it before the update, and checked for inf/nan;
a step with a non-finite gradient is skipped and the scale shrinks by ``backoff_factor``;
after ``growth_interval`` good steps in a row it grows by ``growth_factor``. In a graph
(``graph.set_grad_scaler(scaler)``) the check and the conditional update are ops of the
compiled training step, and the scale lives in the scaler's state tensors.

>>> import flowserve as flow
>>> scaler = flow.amp.GradScaler(init_scale=1024.0, growth_interval=2)
>>> scaler.get_scale()
1024.0
"""

from __future__ import annotations

from flowserve import dtypes
from flowserve.autograd.grad_mode import no_grad
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
def found_non_finite(grads) -> "object":
    """A 0-d bool tensor: whether any of ``grads`` holds an inf or a nan.

    ``sum(g * 0)`` is 0 for finite gradients and nan as soon as one element is not."""
    total = None
    for g in grads:
        probe = ops_functional.sum(ops_functional.cast(g, dtypes.float32) * 0.0)
        total = probe if total is None else total + probe
    if total is None:
        return creation.zeros((), dtype=dtypes.bool_)
    return ops_functional.ne(total, total)


class StaticGradScaler:
    """A constant loss scale: ``flow.amp.StaticGradScaler(scale_factor)``; never skips a step."""

    dynamic = False

    def __init__(self, scale_factor: float):
        if scale_factor <= 0:
            raise ValueError(f"StaticGradScaler expects a positive scale_factor, got {scale_factor}")
        self._scale = creation.full((), float(scale_factor), dtype=dtypes.float32)

    def get_scale(self) -> float:
        return float(self._scale.numpy())

    def scale(self, outputs):
        return outputs * self._scale

    def unscale_(self, optimizer) -> None:
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad = p.grad / self._scale

    def step(self, optimizer, *args, **kwargs):
        self.unscale_(optimizer)
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        if new_scale is not None:
            self._scale = creation.full((), float(new_scale), dtype=dtypes.float32)

    def state_dict(self) -> dict:
        return {"scale": self.get_scale()}

    def load_state_dict(self, state: dict) -> None:
        self.update(state["scale"])

    def graph_state(self) -> dict:
        """State nn.Graph keeps across calls (none: the scale is a constant)."""
        return {}

    def graph_update(self, found_inf, state: dict) -> None:
        """A static scale never changes."""


class GradScaler(StaticGradScaler):
    """Dynamic loss scaling, PyTorch's and OneFlow's ``GradScaler``.

    Args: ``init_scale`` (2**16), ``growth_factor`` (2.0), ``backoff_factor`` (0.5),
    ``growth_interval`` (2000 good steps before growing).
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        if growth_factor <= 1.0:
            raise ValueError(f"GradScaler expects growth_factor > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler expects 0 < backoff_factor < 1, got {backoff_factor}")
        if int(growth_interval) < 1:
            raise ValueError(f"GradScaler expects growth_interval >= 1, got {growth_interval}")
        super().__init__(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self._growth_tracker = creation.zeros((), dtype=dtypes.int64)
        self._found_inf: dict = {}
        self._enabled = bool(enabled)

    # ``enabled=False`` (PyTorch's switch, e.g. ``GradScaler(enabled=dtype == "float16")``):
    # scale() returns the loss, step() is the optimizer's step, and graphs scale nothing

    @property
    def dynamic(self) -> bool:
        return self._enabled

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return super().get_scale() if self._enabled else 1.0

    def scale(self, outputs):
        return super().scale(outputs) if self._enabled else outputs

    def unscale_(self, optimizer) -> None:
        if not self._enabled:
            return
        super().unscale_(optimizer)
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        with no_grad():
            self._found_inf[id(optimizer)] = bool(found_non_finite(grads).numpy())

    def step(self, optimizer, *args, **kwargs):
        """Unscale (if not done yet) and step, unless a gradient is inf/nan."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        if self._found_inf[id(optimizer)]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        if not self._enabled:
            return
        if new_scale is not None:
            super().update(new_scale)
        else:
            found = any(self._found_inf.values())
            with no_grad():
                self.graph_update(creation.full((), found, dtype=dtypes.bool_), self.graph_state())
        self._found_inf.clear()

    def state_dict(self) -> dict:
        return {"scale": self.get_scale(), "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": int(self._growth_tracker.numpy())}

    def load_state_dict(self, state: dict) -> None:
        self._scale = creation.full((), float(state["scale"]), dtype=dtypes.float32)
        self.growth_factor = float(state.get("growth_factor", self.growth_factor))
        self.backoff_factor = float(state.get("backoff_factor", self.backoff_factor))
        self.growth_interval = int(state.get("growth_interval", self.growth_interval))
        self._growth_tracker = creation.full((), int(state.get("_growth_tracker", 0)), dtype=dtypes.int64)

    def graph_state(self) -> dict:
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_tracker": self._growth_tracker}

    def graph_update(self, found_inf, state: dict) -> None:
        """Shrink the scale after a non-finite step, grow it after ``growth_interval`` good
        ones; written with ``where`` so that it is also an op sequence of a graph."""
        scale, tracker = state["scale"], state["growth_tracker"]
        good_steps = ops_functional.where(found_inf, creation.zeros_like(tracker), tracker + 1)
        grow = ops_functional.ge(good_steps, self.growth_interval)
        grown = ops_functional.where(grow, scale * self.growth_factor, scale)
        scale.copy_(ops_functional.where(found_inf, scale * self.backoff_factor, grown))
        tracker.copy_(ops_functional.where(grow, creation.zeros_like(good_steps), good_steps))
