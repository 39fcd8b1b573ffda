"""``autograd.engine.queue_backward_hooks``: ``finished()`` once the next eager backward
pass has set every ``.grad`` (what DistributedDataParallel averages gradients on)."""

from __future__ import annotations

import numpy as np

import flowserve as flow
from flowserve.autograd.engine import queue_backward_hooks


class Recorder:
    def __init__(self, watched):
        self.watched, self.seen = watched, []

    def finished(self):
        self.seen.append(self.watched.grad.numpy().copy())


def test_finished_sees_the_gradients_of_the_pass_once():
    w = flow.ones(2, requires_grad=True)
    hooks = Recorder(w)
    queue_backward_hooks(hooks)
    queue_backward_hooks(hooks)  # queued once
    flow.autograd.grad((w * 2).sum(), [w])
    assert hooks.seen == []  # autograd.grad sets no .grad: still waiting
    (w * 3).sum().backward()
    assert len(hooks.seen) == 1
    np.testing.assert_array_equal(hooks.seen[0], [3.0, 3.0])
    (w * 3).sum().backward()
    assert len(hooks.seen) == 1  # one backward per queuing
