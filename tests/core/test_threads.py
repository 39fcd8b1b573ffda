"""Grad mode and tracing belong to one thread (and one asyncio task): a ``no_grad`` block or
an ``nn.Graph`` trace in one thread changes nothing in another."""

import asyncio
import threading

import numpy as np

import flowserve as flow
import flowserve.nn as nn

TIMEOUT = 30


def run_in_thread(fn):
    """Start ``fn`` in a thread; returns (thread, errors list filled if fn raises)."""
    errors: list = []

    def target():
        try:
            fn()
        except BaseException as exc:  # reported by the test through `errors`
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, errors


def finish(thread, errors) -> None:
    thread.join(TIMEOUT)
    assert not thread.is_alive(), "worker thread did not finish"
    if errors:
        raise errors[0]


def test_no_grad_in_one_thread_leaves_another_recording():
    x = flow.ones(3, requires_grad=True)
    inside, release, seen = threading.Event(), threading.Event(), {}

    def worker():
        with flow.no_grad():
            inside.set()
            release.wait(TIMEOUT)
            seen["worker"] = (x * 2).requires_grad, flow.is_grad_enabled()

    thread, errors = run_in_thread(worker)
    assert inside.wait(TIMEOUT)
    y = (x * 2).sum()
    assert flow.is_grad_enabled() and y.requires_grad
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 2, 2])
    release.set()
    finish(thread, errors)
    assert seen["worker"] == (False, False)


def test_a_new_thread_starts_with_grad_on_even_under_no_grad():
    seen = {}
    with flow.no_grad():
        thread, errors = run_in_thread(lambda: seen.update(mode=flow.is_grad_enabled()))
        finish(thread, errors)
        assert not flow.is_grad_enabled()
    assert seen["mode"] is True and flow.is_grad_enabled()


def test_set_grad_enabled_as_a_call_affects_only_its_thread():
    seen = {}

    def worker():
        flow.set_grad_enabled(False)
        seen["worker"] = flow.is_grad_enabled()

    thread, errors = run_in_thread(worker)
    finish(thread, errors)
    assert seen["worker"] is False and flow.is_grad_enabled()


def test_asyncio_tasks_have_their_own_grad_mode():
    x = flow.ones(2, requires_grad=True)

    async def without_grad(entered: asyncio.Event, done: asyncio.Event):
        with flow.no_grad():
            entered.set()
            await done.wait()
            return (x * 2).requires_grad

    async def with_grad(entered: asyncio.Event, done: asyncio.Event):
        await entered.wait()
        result = (x * 2).requires_grad
        done.set()
        return result

    async def main():
        entered, done = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(without_grad(entered, done), with_grad(entered, done))

    assert asyncio.run(main()) == [False, True]


class Blocking(nn.Graph):
    """A graph whose build() waits, mid-trace, until the test lets it go on."""

    def __init__(self, model, reached: threading.Event, proceed: threading.Event):
        super().__init__()
        self.model = model
        self.reached, self.proceed = reached, proceed

    def build(self, x):
        y = self.model(x)
        self.reached.set()
        assert self.proceed.wait(TIMEOUT)
        return y


def test_two_threads_trace_two_graphs_at_once():
    flow.manual_seed(0)
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    models = {"relu": nn.Sequential(nn.Linear(4, 3), nn.ReLU()),
              "tanh": nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))}
    graphs, results = {}, {}
    x = flow.randn(2, 4)

    class Synced(nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def build(self, inp):
            barrier.wait()  # both builds are tracing from here on
            out = self.model(inp)
            barrier.wait()
            return out

    def trace(kind):
        graphs[kind] = Synced(models[kind])
        results[kind] = graphs[kind](x)

    workers = [run_in_thread(lambda k=k: trace(k)) for k in models]
    for thread, errors in workers:
        finish(thread, errors)
    for kind, model in models.items():
        np.testing.assert_allclose(results[kind].numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
        ops = [node.op for node in graphs[kind]._last.traced.ir.nodes]
        assert ops.count("matmul") == (1 if kind == "relu" else 2), ops
        assert ("relu" in ops) == (kind == "relu") and ("tanh" in ops) == (kind == "tanh"), ops


def test_eager_ops_run_while_another_thread_traces():
    flow.manual_seed(0)
    reached, proceed = threading.Event(), threading.Event()
    model = nn.Linear(3, 2)
    graph = Blocking(model, reached, proceed)
    out = {}
    thread, errors = run_in_thread(lambda: out.update(y=graph(flow.ones(1, 3))))
    assert reached.wait(TIMEOUT)
    try:
        w = flow.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = (w * w).sum() + flow.tensor([0.5]).sum()
        assert not y.is_lazy and y.item() == 14.5
        y.backward()
        np.testing.assert_allclose(w.grad.numpy(), [2, 4, 6])
        eager = model(flow.ones(1, 3))
        assert not eager.is_lazy and eager.requires_grad
    finally:
        proceed.set()
    finish(thread, errors)
    np.testing.assert_allclose(out["y"].numpy(), eager.detach().numpy(), rtol=1e-6)
    assert all(node.op != "pow" and node.op != "sum" for node in graph._last.traced.ir.nodes)
