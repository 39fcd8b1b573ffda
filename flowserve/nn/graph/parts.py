"""What an ``nn.Graph`` holds besides its modules and config, behind one small interface:
tracing, the optimizer update, ``state_dict`` and printing read ``graph.parts`` instead of
the graph's private attributes (``flow.save`` reads ``graph.deployable_state()``; the
registered modules and the quiet traces are the internal-API section of ``nn.Graph``)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

RECENT_CALLS = 4  # inputs of an inference graph's last calls, kept as reference examples


@dataclass
class GraphParts:
    """``optimizers``: (optimizer, lr scheduler or None) pairs, in ``add_optimizer`` order;
    ``grad_scaler``: the ``GradScaler``/``StaticGradScaler`` or None; ``train_step``: a 0-d
    int64 tensor counting training calls; ``last``: the executor the latest call ran
    (``flowserve.nn.graph.executor``; None before the first call); ``parallel``: the
    distributed part of a training step in a launched run
    (``flowserve.distributed.graph_step.DataParallelStep``), made by the graph before its
    first trace, or None; ``recent_inputs``: copies of the tensor inputs of an inference graph's
    last calls (``flow.save`` stores them as reference examples)."""

    train_step: object
    optimizers: list = field(default_factory=list)
    grad_scaler: object = None
    last: object = None
    parallel: object = None
    recent_inputs: deque = field(default_factory=lambda: deque(maxlen=RECENT_CALLS))

    @property
    def traced(self):
        """The latest call's trace (IR, state tensors, signature), or None."""
        return None if self.last is None else self.last.traced
