"""The eager multi-tensor update (``foreach``) of SGD and Adam/AdamW: the same numbers as
the per-parameter functional update bit for bit, PyTorch's after 3 steps to float32
rounding (parameters and state) where OneFlow's rule is PyTorch's, arrays written in place
only where the optimizer owns them, and eager steps mixed with nn.Graph steps."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import flowserve as flow
from flowserve.optim import foreach

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests (pip install torch==2.13.0)")

TORCH_CASES = [  # where OneFlow's rule is PyTorch's
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)),
    ("Adam", dict(lr=1e-2, amsgrad=True, maximize=True, weight_decay=0.01)),
    ("Adam", dict(lr=1e-2, betas=(0.3, 0.5))),  # lerp's other rounding (weight >= 0.5)
    ("AdamW", dict(lr=1e-2, weight_decay=1e-2)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1, amsgrad=True, maximize=True)),
]
CASES = TORCH_CASES + [  # and OneFlow's rules where they differ (test_optim_oneflow.py checks them)
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, nesterov=True, weight_decay=0.01, maximize=True)),
    ("SGD", dict(lr=0.05, weight_decay=0.01, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.9, maximize=True)),  # the buffer holds OneFlow's sign, PyTorch's negated
    ("Adam", dict(lr=1e-2, do_bias_correction=False, amsgrad=True, weight_decay=0.01)),
    ("AdamW", dict(lr=1e-2, do_bias_correction=False, weight_decay=0.1)),
]
IDS = [name + "-" + ",".join(f"{k}={v}" for k, v in kw.items()) for name, kw in CASES]
TORCH_IDS = IDS[:len(TORCH_CASES)]
SHAPES = [(2 * foreach.CHUNK + 123,), (4, 3, 3, 3), (7,)]  # several chunks, a remainder, tiny tensors
STEPS = 3


def values(dtype=np.float32, seed: int = 0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(STEPS)]
    return params, grads


def train_ours(name, options, params, grads, foreach_):
    ps = [flow.nn.Parameter(flow.tensor(p.copy())) for p in params]
    opt = getattr(flow.optim, name)(ps, foreach=foreach_, **options)
    for step_grads in grads:
        for p, g in zip(ps, step_grads):
            p.grad = flow.tensor(g.copy())
        opt.step()
    return ps, opt


def state_arrays(opt) -> dict:
    return {(i, k): v.numpy().copy() for i, s in opt.state_dict()["state"].items() for k, v in s.items()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,options", CASES, ids=IDS)
def test_foreach_equals_the_per_parameter_update_bit_for_bit(name, options, dtype):
    params, grads = values(dtype)
    fused, fused_opt = train_ours(name, options, params, grads, True)
    plain, plain_opt = train_ours(name, options, params, grads, False)
    for p, q in zip(fused, plain):
        assert p.dtype == q.dtype
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    ours, theirs = state_arrays(fused_opt), state_arrays(plain_opt)
    assert ours.keys() == theirs.keys()
    for key in ours:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=str(key))


@pytest.mark.parametrize("name,options", [CASES[3], CASES[6], CASES[10], CASES[12]],
                         ids=[IDS[3], IDS[6], IDS[10], IDS[12]])
def test_tasks_on_threads_give_the_same_numbers(name, options, monkeypatch):
    monkeypatch.setattr(foreach, "THREADS", 3)
    monkeypatch.setattr(foreach, "TASK", 5000)  # tasks cut tensors, and tasks gather small tensors
    params, grads = values()
    threaded, _ = train_ours(name, options, params, grads, True)
    monkeypatch.setattr(foreach, "THREADS", 1)
    plain, _ = train_ours(name, options, params, grads, False)
    for p, q in zip(threaded, plain):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


@pytest.mark.parametrize("torch_foreach", [False, True], ids=["torch-for-loop", "torch-foreach"])
@pytest.mark.parametrize("name,options", TORCH_CASES, ids=TORCH_IDS)
def test_foreach_matches_torch_after_3_steps(name, options, torch_foreach):
    params, grads = values()
    ours, opt = train_ours(name, options, params, grads, None)
    tps = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    topt = getattr(torch.optim, name)(tps, foreach=torch_foreach, **options)
    for step_grads in grads:
        for p, g in zip(tps, step_grads):
            p.grad = torch.from_numpy(g.copy())
        topt.step()
    for p, q in zip(ours, tps):
        ref = q.detach().numpy()
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())
    tstate = {(i, k): v.numpy() for i, s in topt.state_dict()["state"].items() for k, v in s.items()}
    mine = state_arrays(opt)
    assert mine.keys() == tstate.keys()
    for key, ref in tstate.items():
        np.testing.assert_allclose(mine[key], ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max(), err_msg=str(key))


def test_arrays_shared_with_other_tensors_are_never_written():
    source = flow.tensor(np.ones(10, np.float32))
    p = flow.nn.Parameter(flow.zeros(10))
    p.data = source  # p now shares source's array
    readonly = np.frombuffer(np.full(4, 2.0, np.float32).tobytes(), dtype=np.float32)
    q = flow.nn.Parameter(flow.zeros(4))
    q.data = flow.Tensor._wrap(readonly)
    opt = flow.optim.SGD([p, q], lr=0.5, momentum=0.9)
    for t in (p, q):
        t.grad = flow.ones_like(t)
    opt.step()
    np.testing.assert_array_equal(source.numpy(), np.ones(10, np.float32))
    np.testing.assert_array_equal(readonly, np.full(4, 2.0, np.float32))
    np.testing.assert_allclose(p.numpy(), 0.5)
    # from the second step on, the optimizer's own arrays are updated in place, as in PyTorch
    array, version, alias = p._data, p._version, p.detach()
    opt.step()
    assert p._data is array and p._version == version + 1
    np.testing.assert_allclose(alias.numpy(), 0.5 - 0.5 * 1.9)


@pytest.mark.parametrize("duplicate", [copy.deepcopy, lambda opt: pickle.loads(pickle.dumps(opt))],
                         ids=["deepcopy", "pickle"])
def test_a_copied_optimizer_writes_only_its_own_arrays(duplicate):
    p = flow.nn.Parameter(flow.ones(4))
    opt = flow.optim.Adam([p], lr=0.5)
    for _ in range(2):
        p.grad = flow.ones_like(p)
        opt.step()
    twin = duplicate(opt)
    q = twin.param_groups[0]["params"][0]
    q.grad = flow.ones_like(q)
    before, state = p.numpy().copy(), opt.state[p]["exp_avg"].numpy().copy()
    twin.step()
    twin.step()
    np.testing.assert_array_equal(p.numpy(), before)
    np.testing.assert_array_equal(opt.state[p]["exp_avg"].numpy(), state)
    assert not np.array_equal(q.numpy(), before)


def test_updates_foreach_cannot_take_fall_back_to_the_per_parameter_update():
    half = flow.nn.Parameter(flow.ones(5, dtype=flow.float16))
    half.grad = flow.ones(5, dtype=flow.float16)
    assert not foreach.usable({"lr": 0.1}, [half])
    assert not foreach.usable({"lr": flow.tensor(0.1)}, [flow.nn.Parameter(flow.ones(2))])
    opt = flow.optim.Adam([half], lr=0.1)
    opt.step()
    assert half.dtype == flow.float16 and float(half.numpy()[0]) == pytest.approx(0.9, abs=1e-3)


class TrainGraph(flow.nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = flow.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        return loss


@pytest.mark.parametrize("name,options", [("SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
                                          ("Adam", dict(lr=1e-2, amsgrad=True))], ids=["SGD", "Adam"])
def test_eager_steps_and_graph_steps_mix(name, options):
    """Eager fused steps, graph steps and eager steps again share parameters and state:
    the same values as eager per-parameter steps throughout."""
    flow.manual_seed(0)
    mixed = flow.nn.Sequential(flow.nn.Linear(5, 8), flow.nn.Tanh(), flow.nn.Linear(8, 3))
    flow.manual_seed(0)
    plain = flow.nn.Sequential(flow.nn.Linear(5, 8), flow.nn.Tanh(), flow.nn.Linear(8, 3))
    opt = getattr(flow.optim, name)(mixed.parameters(), **options)
    plain_opt = getattr(flow.optim, name)(plain.parameters(), foreach=False, **options)
    graph = TrainGraph(mixed, opt)
    rng = np.random.default_rng(1)
    for i, mode in enumerate("eeggeegge"):
        x, y = (flow.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((6, 5), (6, 3)))
        if mode == "g":
            graph(x, y)
        else:
            opt.zero_grad()
            flow.nn.functional.mse_loss(mixed(x), y).backward()
            opt.step()
        plain_opt.zero_grad()
        flow.nn.functional.mse_loss(plain(x), y).backward()
        plain_opt.step()
        for p, q in zip(mixed.parameters(), plain.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"step {i} ({mode})")
    for p, q in zip(mixed.parameters(), plain.parameters()):
        for key, value in plain_opt.state[q].items():
            np.testing.assert_allclose(opt.state[p][key].numpy(), value.numpy(), rtol=1e-5, atol=1e-7)
