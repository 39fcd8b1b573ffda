"""Learning-rate schedulers, with PyTorch's rules, values and ``state_dict`` layout.

A scheduler sets ``group["lr"]`` of its optimizer's parameter groups at each ``step()``.
In eager mode call ``optimizer.step()`` then ``scheduler.step()``; in a training
``nn.Graph``, ``add_optimizer(opt, lr_sch=scheduler)`` feeds each call the current
``group["lr"]`` and steps the scheduler after the call. Inside ``build()``, a scheduler of
one of the graph's optimizers (attached or stepped by the user between calls) reads as
that call's values: ``get_last_lr()``, ``last_epoch`` and its other numbers are 0-d
tensors fed on every call (``flowserve.nn.graph.optimizer_reads``); reading another
scheduler there, or stepping one, is an error rather than a value frozen at trace time.
OneFlow's ``verbose=True`` (or ``scheduler.verbose = True``) makes a graph it is attached to
print ``Last step 0 adjusting learning rate to 0.1`` before each call, on rank 0, as OneFlow's
graph does; an eager ``step()`` prints nothing.

>>> import flowserve as flow
>>> opt = flow.optim.SGD(flow.nn.Linear(2, 1).parameters(), lr=0.1)
>>> sched = flow.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
>>> for _ in range(4):
...     opt.step()
...     sched.step()
>>> sched.get_last_lr()
[0.025]
"""

from __future__ import annotations

import math
import types
from bisect import bisect_right
from collections import Counter

from flowserve._missing import module_getattr as _module_getattr
from flowserve.dispatch import current_trace
from flowserve.errors import GraphError
from flowserve.optim.optimizer import Optimizer
from flowserve.tensor import Tensor


def _group_lrs(optimizer: Optimizer) -> list:
    return [group["lr"] for group in optimizer.param_groups]


def _is_traced(value) -> bool:
    """Whether ``value`` is what a graph feeds on every call: a lazy tensor, or a list of them."""
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_is_traced(v) for v in value)
    return isinstance(value, Tensor) and value.is_lazy


class StepState:
    """An attribute that ``step()`` changes (``last_epoch``, the last learning rates): kept
    in the instance's ``__dict__`` (so ``state_dict()`` has PyTorch's keys), and read as
    usual, except inside ``nn.Graph.build``: there a graph that holds the scheduler's
    optimizer has put per-call values in its place (``flowserve.nn.graph.optimizer_reads``);
    any other scheduler's value would be frozen into the graph, so reading it is an error."""

    def __init__(self, label: str | None = None):
        self.label = label

    def __set_name__(self, owner, name: str) -> None:
        self.name = name
        self.label = self.label or name

    def __get__(self, scheduler, owner=None):
        if scheduler is None:
            return self
        try:
            value = scheduler.__dict__[self.name]
        except KeyError:
            raise AttributeError(f"{type(scheduler).__name__!r} object has no attribute {self.name!r}") from None
        if current_trace() is not None and not _is_traced(value):
            raise GraphError(
                f"nn.Graph.build read {type(scheduler).__name__}.{self.label} of a scheduler whose optimizer "
                "the graph does not hold: the graph would keep its value at trace time. Add the optimizer to the "
                "graph (graph.add_optimizer(opt, lr_sch=scheduler)) so build() reads it on every call, or pass "
                "the value to the graph as an input")
        return value

    def __set__(self, scheduler, value) -> None:
        scheduler.__dict__[self.name] = value


def _refuse_step_in_trace(scheduler) -> None:
    if current_trace() is not None:
        raise GraphError(
            f"{type(scheduler).__name__}.step() inside nn.Graph.build would step the scheduler once, when the "
            "graph is traced, not on every call: attach it with graph.add_optimizer(opt, lr_sch=scheduler) "
            "(the graph steps it after each call), or call step() after each call of the graph")


class LRScheduler:
    """Base class: ``step()``, ``get_last_lr()``, ``last_epoch``, ``state_dict()``.

    Subclasses define ``get_lr()`` (the chainable form, from the groups' current lr) and
    may define ``_get_closed_form_lr()`` (used by ``step(epoch)``), as PyTorch does.
    """

    _is_initial: bool = False
    verbose: bool = False  # OneFlow's: a graph it is attached to prints each call's lr (nn.graph.optimizer_reads)
    last_epoch = StepState()
    _step_count = StepState()
    _last_lr = StepState("get_last_lr()")

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        optimizer.add_lr_scheduler(self)
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when "
                                   f"resuming {type(self).__name__} with last_epoch={last_epoch}; "
                                   "load the optimizer's state_dict first")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _keep_verbose(self, verbose: bool) -> None:
        """OneFlow's ``verbose=True``: kept in the instance (and its ``state_dict()``, as OneFlow
        saves it) only when set, so that other state dicts keep PyTorch's keys."""
        if verbose:
            self.verbose = True

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list:
        raise NotImplementedError(f"{type(self).__name__} must define get_lr()")

    def get_last_lr(self) -> list:
        """The learning rates the last ``step()`` set, one per parameter group."""
        return self._last_lr

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``) and set the groups' ``lr``."""
        _refuse_step_in_trace(self)
        self._step_count += 1
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed_form = getattr(self, "_get_closed_form_lr", None)
            values = closed_form() if closed_form is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = _group_lrs(self.optimizer)

    # PyTorch's layout: every attribute but the optimizer
    _NOT_SAVED = ("optimizer",)

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._NOT_SAVED}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)

    def __setstate__(self, state: dict) -> None:  # a copy is a scheduler of its optimizer too
        self.__dict__.update(state)
        self.optimizer.add_lr_scheduler(self)


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
            return _group_lrs(self.optimizer)
        return [lr * self.gamma for lr in _group_lrs(self.optimizer)]

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
            return _group_lrs(self.optimizer)
        factor = self.gamma ** self.milestones[self.last_epoch]
        return [lr * factor for lr in _group_lrs(self.optimizer)]

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
        lrs = _group_lrs(self.optimizer)
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
        lrs = _group_lrs(self.optimizer)
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
        lrs = _group_lrs(self.optimizer)
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
        lrs, eta_min, t_max, epoch = _group_lrs(self.optimizer), self.eta_min, self.T_max, self.last_epoch
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
        _refuse_step_in_trace(self)
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


class _ClosedForm(LRScheduler):
    """A scheduler given by ``lr_at(base_lr, step)``."""

    def lr_at(self, base: float, step: int) -> float:
        raise NotImplementedError

    def get_lr(self) -> list:
        return [self.lr_at(base, self.last_epoch) for base in self.base_lrs]

    _get_closed_form_lr = get_lr


class PolynomialLR(_ClosedForm):
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


class CosineDecayLR(_ClosedForm):
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
        _refuse_step_in_trace(self)
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


__getattr__ = _module_getattr("flowserve.optim.lr_scheduler")  # PyTorch/OneFlow names flowserve lacks: say what to use instead
