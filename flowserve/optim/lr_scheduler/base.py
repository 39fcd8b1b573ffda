"""The schedulers' base: ``LRScheduler`` (``step()``, ``get_last_lr()``, ``state_dict()``),
the ``StepState`` attributes a graph feeds per call, and ``ClosedForm`` for schedules given
by a formula of the step."""

from __future__ import annotations

from flowserve.dispatch import current_trace
from flowserve.errors import GraphError
from flowserve.optim.optimizer import Optimizer
from flowserve.tensor import Tensor


def group_lrs(optimizer: Optimizer) -> list:
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


def refuse_step_in_trace(scheduler) -> None:
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
        refuse_step_in_trace(self)
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
        self._last_lr = group_lrs(self.optimizer)

    # PyTorch's layout: every attribute but the optimizer
    _NOT_SAVED = ("optimizer",)

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._NOT_SAVED}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)

    def __setstate__(self, state: dict) -> None:  # a copy is a scheduler of its optimizer too
        self.__dict__.update(state)
        self.optimizer.add_lr_scheduler(self)



class ClosedForm(LRScheduler):
    """A scheduler given by ``lr_at(base_lr, step)``."""

    def lr_at(self, base: float, step: int) -> float:
        raise NotImplementedError

    def get_lr(self) -> list:
        return [self.lr_at(base, self.last_epoch) for base in self.base_lrs]

    _get_closed_form_lr = get_lr

