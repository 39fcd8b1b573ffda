"""``autograd.engine.queue_backward_hooks``: each leaf is reported once its gradient is
final, then the end of the pass (what DistributedDataParallel overlaps communication with)."""

from __future__ import annotations

import numpy as np

import flowserve as flow
from flowserve.autograd.engine import queue_backward_hooks


class Recorder:
    def __init__(self):
        self.ready, self.finished_with = [], None

    def leaf_ready(self, leaf):
        self.ready.append((leaf, leaf.grad.numpy().copy()))

    def finished(self):
        self.finished_with = len(self.ready)


def test_leaves_are_reported_when_their_gradient_is_final():
    flow.manual_seed(0)
    shared = flow.randn(3, 3, requires_grad=True)
    head = flow.randn(3, 1, requires_grad=True)
    x = flow.randn(2, 3)
    hooks = Recorder()
    queue_backward_hooks(hooks)
    ((x @ shared).tanh() @ shared @ head).sum().backward()  # ``shared`` is used twice
    assert sorted(id(leaf) for leaf, _ in hooks.ready) == sorted([id(shared), id(head)])
    assert hooks.ready[0][0] is head  # the last layer's gradient is final first
    for leaf, grad_then in hooks.ready:
        np.testing.assert_array_equal(grad_then, leaf.grad.numpy())
    assert hooks.finished_with == 2


def test_hooks_serve_one_backward_and_skip_autograd_grad():
    w = flow.ones(2, requires_grad=True)
    hooks = Recorder()
    queue_backward_hooks(hooks)
    flow.autograd.grad((w * 2).sum(), [w])
    assert hooks.finished_with is None  # still waiting for a backward() that fills .grad
    (w * 3).sum().backward()
    assert hooks.finished_with == 1
    (w * 3).sum().backward()
    assert len(hooks.ready) == 1  # not queued again
