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

from flowserve._missing import module_getattr as _module_getattr
from flowserve.optim.lr_scheduler.base import LRScheduler, StepState
from flowserve.optim.lr_scheduler.oneflow import (CosineAnnealingWarmRestarts, CosineDecayLR, PolynomialLR, WarmUpLR,
                                                  WarmupLR)
from flowserve.optim.lr_scheduler.pytorch import (ConstantLR, CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR,
                                                  MultiStepLR, SequentialLR, StepLR)

__all__ = ["ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CosineDecayLR", "ExponentialLR",
           "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR", "PolynomialLR", "SequentialLR", "StepLR",
           "StepState", "WarmUpLR", "WarmupLR"]

__getattr__ = _module_getattr("flowserve.optim.lr_scheduler")  # PyTorch/OneFlow names flowserve lacks: say what to use instead
