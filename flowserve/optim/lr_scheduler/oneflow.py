"""The schedules with OneFlow's options: ``PolynomialLR`` (PyTorch's, and OneFlow's
``decay_batch``/``end_learning_rate``/``cycle``), ``CosineAnnealingWarmRestarts`` (with
OneFlow's ``decay_rate`` and ``restart_limit``), and OneFlow's ``CosineDecayLR`` and
``WarmUpLR``."""

from __future__ import annotations

import math

from flowserve.optim.lr_scheduler.base import ClosedForm, LRScheduler, StepState, refuse_step_in_trace
from flowserve.optim.optimizer import Optimizer


class PolynomialLR(ClosedForm):
    """``lr = base * (1 - min(step, total_iters) / total_iters) ** power`` (PyTorch). OneFlow's
    spelling is accepted too: ``PolynomialLR(opt, decay_batch=..., end_learning_rate=...,
    power=..., cycle=...)`` decays to ``end_learning_rate`` instead of 0, and with ``cycle``
    restarts with a period grown to the next multiple of ``decay_batch``."""

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1, *,
                 decay_batch: int | None = None, end_learning_rate: float = 0.0, cycle: bool = False):
        self.total_iters = int(decay_batch if decay_batch is not None else total_iters)
        if self.total_iters <= 0:
            raise ValueError(f"PolynomialLR expects total_iters (decay_batch) > 0, got {self.total_iters}")
        self.power, self.end_learning_rate, self.cycle = power, end_learning_rate, cycle
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict:
        """PyTorch's keys; OneFlow's options only where they differ from PyTorch's rule."""
        state = super().state_dict()
        for key, plain in (("end_learning_rate", 0.0), ("cycle", False)):
            if state[key] == plain:
                del state[key]
        return state

    def lr_at(self, base: float, step: int) -> float:
        period = self.total_iters
        if self.cycle:
            period = period * max(1, math.ceil(step / period))
        else:
            step = min(step, period)
        return (base - self.end_learning_rate) * (1 - step / period) ** self.power + self.end_learning_rate


class CosineDecayLR(ClosedForm):
    """OneFlow's cosine decay: ``lr = base * ((1 - alpha) * (1 + cos(pi * s / decay_steps)) / 2 + alpha)``
    with ``s = min(step, decay_steps)``."""

    def __init__(self, optimizer: Optimizer, decay_steps: int, alpha: float = 0.0, last_step: int = -1,
                 verbose: bool = False):
        if decay_steps <= 0:
            raise ValueError(f"CosineDecayLR expects decay_steps > 0, got {decay_steps}")
        self.decay_steps, self.alpha = decay_steps, alpha
        self._keep_verbose(verbose)
        super().__init__(optimizer, last_step)

    def lr_at(self, base: float, step: int) -> float:
        cos = 0.5 * (1 + math.cos(math.pi * min(step, self.decay_steps) / self.decay_steps))
        return base * ((1 - self.alpha) * cos + self.alpha)


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR: cosine annealing to ``eta_min`` over ``T_0`` epochs, then restarts with periods
    multiplied by ``T_mult``; ``step(epoch)`` accepts fractional epochs (PyTorch's rule).

    OneFlow's options: after ``k`` restarts the cosine starts from ``base_lr * decay_rate**k``,
    ``lr = eta_min + (base_lr * decay_rate**k - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2``,
    and with ``restart_limit > 0`` the lr stays at ``eta_min`` from restart ``restart_limit``
    on (0: unlimited). The defaults (1.0 and 0) are PyTorch's schedule. Positional arguments
    are OneFlow's (``..., eta_min, decay_rate, restart_limit, last_step``); PyTorch's
    ``last_epoch`` is accepted by name.

    >>> import flowserve as flow
    >>> opt = flow.optim.SGD(flow.nn.Linear(2, 1).parameters(), lr=1.0)
    >>> sched = flow.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, decay_rate=0.5)
    >>> sched.step(); sched.step(); sched.get_last_lr()  # the first restart: lr * 0.5
    [0.5]
    """

    T_cur = StepState()
    T_i = StepState()

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,  # noqa: N803
                 decay_rate: float = 1.0, restart_limit: int = 0, last_step: int = -1, verbose: bool = False, *,
                 last_epoch: int | None = None):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if restart_limit < 0 or not isinstance(restart_limit, int):
            raise ValueError(f"Expected integer restart_limit >= 0 (0: unlimited), but got {restart_limit}")
        last_epoch = last_step if last_epoch is None else last_epoch
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.decay_rate, self.restart_limit = decay_rate, restart_limit
        self.T_cur = last_epoch
        self._keep_verbose(verbose)
        super().__init__(optimizer, last_epoch)

    def restarts(self) -> int:
        """How many restarts the schedule has made (``T_i = T_0 * T_mult**k``)."""
        if self.T_mult > 1:
            return round(math.log(self.T_i / self.T_0, self.T_mult))
        return max(0, int(self.last_epoch // self.T_0))

    def get_lr(self) -> list:
        k = self.restarts()
        if self.restart_limit and k >= self.restart_limit:
            return [self.eta_min for _ in self.base_lrs]
        cos = (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
        return [self.eta_min + (base * self.decay_rate**k - self.eta_min) * cos for base in self.base_lrs]

    def state_dict(self) -> dict:
        """PyTorch's keys; OneFlow's options only where they differ from PyTorch's schedule."""
        state = super().state_dict()
        for key, plain in (("decay_rate", 1.0), ("restart_limit", 0)):
            if state[key] == plain:
                del state[key]
        return state

    def step(self, epoch=None) -> None:
        refuse_step_in_trace(self)
        self._step_count += 1
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur, self.T_i = self.T_cur - self.T_i, self.T_i * self.T_mult
        elif epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        elif epoch >= self.T_0:
            if self.T_mult == 1:
                self.T_cur = epoch % self.T_0
            else:
                n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                self.T_i = self.T_0 * self.T_mult**n
        else:
            self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]


def _lr_of(scheduler: LRScheduler, step: int) -> list:
    """The learning rates ``scheduler`` gives at ``step`` (its closed form)."""
    saved = scheduler.last_epoch
    scheduler.last_epoch = step
    try:
        closed = getattr(scheduler, "_get_closed_form_lr", None)
        return closed() if closed is not None else scheduler.get_lr()
    finally:
        scheduler.last_epoch = saved


class WarmUpLR(LRScheduler):
    """OneFlow's warmup: for ``warmup_iters`` steps the lr is ``base * factor``, with factor
    ``warmup_factor`` (``"constant"``) or rising linearly from ``warmup_factor`` to where the
    wrapped scheduler is at ``warmup_iters`` (``"linear"``); then the wrapped scheduler's lr
    at the global step (or at ``step - warmup_iters`` with ``warmup_prefix=True``, whose linear
    warmup then ends at 1). Wraps a scheduler or an optimizer (OneFlow's ``WarmupLR`` too)."""

    def __init__(self, scheduler_or_optimizer, warmup_factor: float = 1.0 / 3, warmup_iters: int = 5,
                 warmup_method: str = "linear", warmup_prefix: bool = False, last_step: int = -1,
                 verbose: bool = False):
        if warmup_method not in ("linear", "constant"):
            raise ValueError(f"'warmup_method' must be 'linear' or 'constant', but got {warmup_method}")
        inner = scheduler_or_optimizer if isinstance(scheduler_or_optimizer, LRScheduler) else None
        optimizer = inner.optimizer if inner is not None else scheduler_or_optimizer
        if not isinstance(optimizer, Optimizer):
            raise ValueError("'scheduler_or_optimizer' must be a LRScheduler or an Optimizer, but got "
                             f"{type(scheduler_or_optimizer).__name__}")
        if inner is None and warmup_iters <= 0:
            raise ValueError("When 'scheduler_or_optimizer' is an optimizer warmup_iters can't be equal to 0")
        self.inner, self.warmup_factor, self.warmup_iters = inner, warmup_factor, warmup_iters
        self.warmup_method, self.warmup_prefix = warmup_method, warmup_prefix
        self._keep_verbose(verbose)
        super().__init__(optimizer, last_step)

    def _factor(self, step: int, base: float, end: float) -> float:
        if self.warmup_method == "constant":
            return self.warmup_factor
        end_factor = end / base if base else 1.0
        return self.warmup_factor + (end_factor - self.warmup_factor) * step / self.warmup_iters

    def get_lr(self) -> list:
        step = self.last_epoch
        if step >= self.warmup_iters:
            if self.inner is None:
                return list(self.base_lrs)
            return _lr_of(self.inner, step - self.warmup_iters if self.warmup_prefix else step)
        ends = self.base_lrs if self.inner is None or self.warmup_prefix else _lr_of(self.inner, self.warmup_iters)
        return [base * self._factor(step, base, end) for base, end in zip(self.base_lrs, ends)]

    _get_closed_form_lr = get_lr
    _NOT_SAVED = ("optimizer", "inner")


WarmupLR = WarmUpLR  # OneFlow's other spelling
