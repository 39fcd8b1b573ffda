"""PyTorch's schedulers, with its rules and values: ``LambdaLR``, ``StepLR``,
``MultiStepLR``, ``ConstantLR``, ``LinearLR``, ``ExponentialLR``, ``CosineAnnealingLR``,
``SequentialLR``."""

from __future__ import annotations

import math
import types
from bisect import bisect_right
from collections import Counter

from flowserve.optim.lr_scheduler.base import LRScheduler, group_lrs, refuse_step_in_trace
from flowserve.optim.optimizer import Optimizer


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)``; the lambdas are not saved (only callable
    objects' attributes are, as in PyTorch).

    >>> import flowserve as flow
    >>> opt = flow.optim.SGD(flow.nn.Linear(2, 1).parameters(), lr=0.1)
    >>> warmup = flow.optim.lr_scheduler.LambdaLR(opt, lambda e: min(1.0, (e + 1) / 5))
    """

    def __init__(self, optimizer: Optimizer, lr_lambda, last_epoch: int = -1):
        self.optimizer = optimizer
        groups = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != groups:
                raise ValueError(f"Expected {groups} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * groups
        super().__init__(optimizer, last_epoch)

    _NOT_SAVED = ("optimizer", "lr_lambdas")

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else dict(fn.__dict__)
                               for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        lambdas = state_dict.pop("lr_lambdas")
        self.__dict__.update(state_dict)
        for fn, saved in zip(self.lr_lambdas, lambdas):
            if saved is not None:
                fn.__dict__.update(saved)

    def get_lr(self) -> list:
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return group_lrs(self.optimizer)
        return [lr * self.gamma for lr in group_lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each milestone epoch."""

    def __init__(self, optimizer: Optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        if self.last_epoch not in self.milestones:
            return group_lrs(self.optimizer)
        factor = self.gamma ** self.milestones[self.last_epoch]
        return [lr * factor for lr in group_lrs(self.optimizer)]

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self.milestones = Counter(self.milestones)  # a plain dict after flow.save / flow.load

    def _get_closed_form_lr(self) -> list:
        milestones = sorted(self.milestones.elements())
        return [base * self.gamma ** bisect_right(milestones, self.last_epoch) for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """Multiply the lr by ``factor`` until epoch ``total_iters``."""

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1):
        if not 0 <= factor <= 1.0:
            raise ValueError(f"ConstantLR expected a factor between 0 and 1, got {factor}")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        lrs = group_lrs(self.optimizer)
        if self.last_epoch == 0:
            return [lr * self.factor for lr in lrs]
        if self.last_epoch != self.total_iters:
            return lrs
        return [lr * (1.0 / self.factor) for lr in lrs]

    def _get_closed_form_lr(self) -> list:
        factor = self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)
        return [base * factor for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the lr linearly from ``start_factor`` to ``end_factor`` over ``total_iters``
    epochs: the usual warmup.

    >>> import flowserve as flow
    >>> opt = flow.optim.SGD(flow.nn.Linear(2, 1).parameters(), lr=0.1)
    >>> warmup = flow.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=4)
    """

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1.0:
            raise ValueError(f"LinearLR expected start_factor in (0, 1], got {start_factor}")
        if not 0 <= end_factor <= 1.0:
            raise ValueError(f"LinearLR expected end_factor in [0, 1], got {end_factor}")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        lrs = group_lrs(self.optimizer)
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in lrs]
        if self._is_initial or self.last_epoch > self.total_iters:
            return lrs
        span = self.end_factor - self.start_factor
        factor = 1.0 + span / (self.total_iters * self.start_factor + (self.last_epoch - 1) * span)
        return [lr * factor for lr in lrs]

    def _get_closed_form_lr(self) -> list:
        done = min(self.total_iters, self.last_epoch) / self.total_iters
        factor = self.start_factor + (self.end_factor - self.start_factor) * done
        return [base * factor for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        lrs = group_lrs(self.optimizer)
        return lrs if self._is_initial else [lr * self.gamma for lr in lrs]

    def _get_closed_form_lr(self) -> list:
        return [base * self.gamma**self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from the initial lr to ``eta_min`` over ``T_max`` epochs (SGDR
    without restarts), in PyTorch's recursive form."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        lrs, eta_min, t_max, epoch = group_lrs(self.optimizer), self.eta_min, self.T_max, self.last_epoch
        if self._is_initial:
            return lrs
        if self._step_count == 1 and epoch > 0:
            return [eta_min + (base - eta_min) * (1 + math.cos(epoch * math.pi / t_max)) / 2
                    for base in self.base_lrs]
        if (epoch - 1 - t_max) % (2 * t_max) == 0:
            return [lr + (base - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
                    for base, lr in zip(self.base_lrs, lrs)]
        ratio = (1 + math.cos(math.pi * epoch / t_max)) / (1 + math.cos(math.pi * (epoch - 1) / t_max))
        return [ratio * (lr - eta_min) + eta_min for lr in lrs]

    def _get_closed_form_lr(self) -> list:
        cos = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * cos for base in self.base_lrs]


def _undo_initial_steps(sched) -> None:
    """Undo the step each inner scheduler's constructor took (nested ones included)."""
    for inner in sched._schedulers:
        if hasattr(inner, "_schedulers"):
            _undo_initial_steps(inner)
        else:
            inner.last_epoch -= 1


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after the other, switching at ``milestones`` (warmup then decay).

    >>> import flowserve as flow
    >>> opt = flow.optim.SGD(flow.nn.Linear(2, 1).parameters(), lr=0.1)
    >>> sched = flow.optim.lr_scheduler
    >>> warmup = sched.LinearLR(opt, start_factor=0.1, total_iters=3)
    >>> decay = sched.CosineAnnealingLR(opt, T_max=10)
    >>> both = sched.SequentialLR(opt, [warmup, decay], milestones=[3])
    """

    def __init__(self, optimizer: Optimizer, schedulers: list, milestones: list, last_epoch: int = -1):
        if not schedulers:
            raise ValueError("SequentialLR expects at least one scheduler, but got no scheduler.")
        for i, sched in enumerate(schedulers):
            if getattr(sched, "optimizer", None) is not optimizer:
                raise ValueError(f"SequentialLR expects all schedulers to belong to the same optimizer, "
                                 f"but scheduler {type(sched).__name__} at index {i} has another one")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR expects one milestone fewer than schedulers, got "
                             f"{len(schedulers)} schedulers and {len(milestones)} milestones")
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        optimizer.add_lr_scheduler(self)
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        _undo_initial_steps(self)
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self) -> None:
        refuse_step_in_trace(self)
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            sched._update_lr(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()

    _NOT_SAVED = ("optimizer", "_schedulers")

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        saved = state_dict.pop("_schedulers")
        self.__dict__.update(state_dict)
        for sched, state in zip(self._schedulers, saved):
            sched.load_state_dict(state)


# -- PyTorch's PolynomialLR and CosineAnnealingWarmRestarts (with OneFlow's options), OneFlow's CosineDecayLR
# and WarmUpLR --

