"""``generator=`` inside ``nn.Graph.build``: the graph's draws come from that generator's
per-call seed, repeat under ``g.manual_seed(s)``, and leave the default generator alone."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

import flowserve as flow
import flowserve.nn as nn
from flowserve.exporter import export
from flowserve.ops import creation
from flowserve.ops.random import uniform_seeded


class _Drawing(nn.Graph):
    def __init__(self, generator):
        super().__init__()
        self.generator = generator

    def build(self, x):
        g, b = self.generator, x.shape[0]
        return {"randn": flow.randn(b, 64, generator=g), "rand": flow.rand(b, 64, generator=g),
                "randint": flow.randint(0, 10, (b, 64), generator=g),
                "randn_like": flow.randn_like(x, generator=g), "rand_like": flow.rand_like(x, generator=g),
                "randperm": flow.randperm(16, generator=g),
                "normal": flow.normal(x, 2.0, generator=g),
                "bernoulli": flow.bernoulli(flow.full((64,), 0.3), generator=g),
                "multinomial": flow.multinomial(flow.ones(4, 8), 3, generator=g),
                "normal_": (x * 0).normal_(generator=g), "uniform_": (x * 0).uniform_(-1, 1, generator=g)}


def _default_state():
    return creation.default_generator.rng.bit_generator.state


def _equal(a: dict, b: dict) -> dict:
    return {k: np.array_equal(a[k].numpy(), b[k].numpy()) for k in a}


def test_graph_draws_repeat_per_generator_seed_and_leave_the_default_generator_alone():
    g = flow.Generator()
    graph = _Drawing(g)
    x = flow.zeros(8, 64)
    before = _default_state()
    g.manual_seed(7)
    first, second = graph(x), graph(x)  # the first call also compiles the graph
    g.manual_seed(7)
    again = graph(x)
    g.manual_seed(8)
    other = graph(x)
    assert _default_state() == before  # neither tracing nor calls drew from flow.manual_seed's generator
    assert all(_equal(first, again).values())
    fresh = _equal(first, second)  # a call continues the generator: other draws
    assert not any(fresh.values()), fresh
    changed = _equal(first, other)
    assert not any(changed.values()), changed


def test_graph_draws_do_not_depend_on_the_default_generator():
    g = flow.Generator()
    graph = _Drawing(g)
    x = flow.zeros(4, 64)
    outs = []
    for default_seed in (1, 2):
        flow.manual_seed(default_seed)
        g.manual_seed(3)
        outs.append(graph(x))
    assert all(_equal(*outs).values())


def test_graph_draws_are_the_documented_function_of_the_generator_seed():
    g = flow.Generator()

    class G(nn.Graph):
        def build(self, x):
            return x + flow.rand(3, 5, generator=g)

    g.manual_seed(11)
    out = G()(flow.zeros(3, 5)).numpy()
    seed = flow.Generator(11).draw_seed()  # the seed the call drew
    expected = uniform_seeded(flow.zeros(3, 5), flow.tensor(seed), stream=1).numpy()
    np.testing.assert_array_equal(out, expected)


def test_graph_generator_draws_have_the_right_distributions():
    g = flow.Generator(0)
    out = _Drawing(g)(flow.zeros(512, 64))
    u = out["rand"].numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    z = np.concatenate([out["randn"].numpy().ravel(), out["randn_like"].numpy().ravel()])
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.01  # normal, not just unit variance
    i = out["randint"].numpy()
    assert i.dtype == np.int64 and i.min() == 0 and i.max() == 9
    assert sorted(out["randperm"].numpy().tolist()) == list(range(16))
    assert abs(out["normal"].numpy().std() - 2) < 0.05
    assert set(np.unique(out["bernoulli"].numpy())) <= {0.0, 1.0}
    m = out["multinomial"].numpy()
    assert m.shape == (4, 3) and all(len(set(row)) == 3 for row in m)  # without replacement
    uu = out["uniform_"].numpy()
    assert uu.min() >= -1 and uu.max() < 1


def test_training_graph_noise_repeats_per_generator_seed():
    g = flow.Generator()
    flow.manual_seed(0)
    model = nn.Linear(4, 4)
    opt = flow.optim.SGD(model.parameters(), lr=0.0)  # lr 0: only the noise changes the loss

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt)

        def build(self, x):
            loss = (self.model(x) + flow.randn_like(x, generator=g)).square().mean()
            loss.backward()
            return loss

    graph, x = Train(), flow.ones(8, 4)
    g.manual_seed(5)
    losses = [float(graph(x).numpy()) for _ in range(2)]
    g.manual_seed(5)
    assert float(graph(x).numpy()) == losses[0] and losses[0] != losses[1]


def test_a_saved_graph_with_a_generator_still_draws_fresh_values(tmp_path):
    g = flow.Generator(1)

    class G(nn.Graph):
        def build(self, x):
            return x + flow.randn(x.shape[0], 8, generator=g)

    graph = G()
    graph(flow.zeros(2, 8))
    flow.save(graph, tmp_path / "g")
    loaded = flow.load(tmp_path / "g")
    a, b = loaded(np.zeros((3, 8), np.float32)), loaded(np.zeros((3, 8), np.float32))
    assert a.shape == flow.Size([3, 8]) and not np.array_equal(a.numpy(), b.numpy())
    # exported, the draws are ONNX Runtime's, fresh per run; the parity check compares the
    # random output's shape and finiteness only
    report = export(tmp_path / "g", tmp_path / "m.onnx").report
    assert {p.compared for p in report.parity} == {"shape"} and "drawn at random" in report.summary()
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: np.zeros((4, 8), np.float32)}
    first, second = session.run(None, feed)[0], session.run(None, feed)[0]
    assert first.shape == (4, 8) and not np.array_equal(first, second) and abs(first.std() - 1) < 0.5
