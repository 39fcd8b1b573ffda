"""Autograd as in PyTorch: ``flow.autograd.grad`` without ``.grad`` side effects,
second derivatives with ``create_graph``, tensor hooks, ``retain_graph``, and grad mode
that belongs to one thread.

    python examples/autograd_and_threads.py
"""

import threading

import flowserve as flow
import flowserve.nn as nn
import flowserve.nn.functional as F

flow.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 8), nn.Softplus(), nn.Linear(8, 1))
x = flow.randn(4, 3, requires_grad=True)

# a gradient penalty: d(output)/d(input), then differentiate its norm w.r.t. the weights
(dx,) = flow.autograd.grad(model(x).sum(), x, create_graph=True)
print("x.grad and the weights' .grad untouched by autograd.grad:", x.grad is None and model[0].weight.grad is None)
penalty = (dx * dx).sum()
penalty.backward(inputs=list(model.parameters()))
print("penalty", round(penalty.item(), 4), "| grad of first weight", tuple(model[0].weight.grad.shape))

# second derivative of tanh at 0.5: -2 tanh(0.5) (1 - tanh(0.5)^2)
t = flow.tensor([0.5], requires_grad=True)
(d1,) = flow.autograd.grad(flow.tanh(t), t, create_graph=True)
(d2,) = flow.autograd.grad(d1, t)
print("tanh'' (0.5) =", round(d2.item(), 4))

# hooks see (and may replace) a gradient; a second backward needs retain_graph=True
h = F.softplus(t) * 3
h.register_hook(lambda g: print("gradient reaching h:", g.tolist()))
h.backward(retain_graph=True)
h.backward()
print("t.grad after two backward passes:", [round(v, 4) for v in t.grad.tolist()])

# no_grad in a background thread does not switch gradients off here
inside, release = threading.Event(), threading.Event()


def background():
    with flow.no_grad():
        inside.set()
        release.wait(10)


worker = threading.Thread(target=background)
worker.start()
inside.wait(10)
print("main thread still records gradients:", (x * 2).requires_grad)
release.set()
worker.join()
