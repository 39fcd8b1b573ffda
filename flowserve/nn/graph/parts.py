"""What an ``nn.Graph`` holds besides its modules and config, behind one small interface:
tracing, the optimizer update, ``state_dict``, printing and ``flow.save`` read
``graph.parts`` instead of the graph's private attributes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GraphParts:
    """``optimizers``: (optimizer, lr scheduler or None) pairs, in ``add_optimizer`` order;
    ``grad_scaler``: the ``GradScaler``/``StaticGradScaler`` or None; ``train_step``: a 0-d
    int64 tensor counting training calls; ``last``: the compiled entry the latest call ran
    (None before the first call); ``parallel``: the distributed part of a training step in a
    launched run (``flowserve.distributed.graph_step.DataParallelStep``), made at the first
    trace, or None."""

    train_step: object
    optimizers: list = field(default_factory=list)
    grad_scaler: object = None
    last: object = None
    parallel: object = None

    @property
    def traced(self):
        """The latest call's trace (IR, state tensors, signature), or None."""
        return None if self.last is None else self.last.traced
