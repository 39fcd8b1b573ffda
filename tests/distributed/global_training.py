"""Training with global tensors, run by every rank (``run``) and checked against the same
model trained in one process on the whole batch with local tensors (``check``): data
parallelism (broadcast parameters, a split(0) batch), model parallelism (split weights),
optimizers, ``clip_grad_norm_``, in-place ops and ``grad_sbp``."""

from __future__ import annotations

import numpy as np

import flowserve as flow
import flowserve.nn as nn
import flowserve.nn.functional as Fn

STEPS = 3
B = flow.sbp.broadcast
OPTIMIZERS = {
    "sgd": lambda ps: flow.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2),
    "adam": lambda ps: flow.optim.Adam(ps, lr=0.05, amsgrad=True),
    "adamw": lambda ps: flow.optim.AdamW(ps, lr=0.05, weight_decay=0.1),
}


def data() -> dict:
    rng = np.random.default_rng(1)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {"x": f(8, 6), "y": f(8, 3), "img": f(4, 2, 6, 6), "labels": rng.integers(0, 3, 4)}


def mlp() -> nn.Module:
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def convnet() -> nn.Module:
    flow.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(12, 3))


def _train(model, opt, loss_fn, clip=None) -> dict:
    out, losses, norms = {}, [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = loss_fn(model)
        loss.backward()
        if clip is not None:
            norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 0.5, clip)))
        opt.step()
        losses.append(float(loss.numpy()))
    out["losses"] = np.array(losses)
    if norms:
        out["norms"] = np.array(norms)
    for name, p in model.named_parameters():
        out[f"param-{name}"] = p.numpy()
    for name, v in opt.state_dict()["state"].get(0, {}).items():
        out[f"state0-{name}"] = v.numpy()
    return out


def cases(pl) -> dict:
    """Case name -> (model, loss of the model): global ones when ``pl`` is a placement,
    the single-process local reference when it is None."""
    d = data()
    glob = pl is not None
    x, y = flow.tensor(d["x"]), flow.tensor(d["y"])
    img, labels = flow.tensor(d["img"]), flow.tensor(d["labels"])
    if glob:
        x, y = x.to_global(pl, flow.sbp.split(0)), y.to_global(pl, flow.sbp.split(0))
        img, labels = img.to_global(pl, flow.sbp.split(0)), labels.to_global(pl, flow.sbp.split(0))
    out = {}

    def data_parallel(make):
        model = make()
        return model.to_global(pl, B) if glob else model

    def model_parallel():
        model = mlp()
        if glob:  # fc1 by output features (its columns of x @ W^T), fc2 by input features (rows)
            model[0].to_global(pl, flow.sbp.split(0))
            model[2].to_global(pl, lambda t: flow.sbp.split(1) if t.ndim == 2 else B)
        return model

    xb, yb = (x.to_global(sbp=B), y.to_global(sbp=B)) if glob else (x, y)
    mse = lambda m, a=x, b=y: (m(a) - b).square().mean()  # noqa: E731
    for opt in OPTIMIZERS:
        out[f"dp-mlp-{opt}"] = (data_parallel(mlp), mse, opt, None)
        out[f"mp-mlp-{opt}"] = (model_parallel(), lambda m: Fn.mse_loss(m(xb), yb), opt, None)
    out["dp-conv-sgd"] = (data_parallel(convnet), lambda m: Fn.cross_entropy(m(img), labels), "sgd", None)
    out["dp-mlp-clip2"] = (data_parallel(mlp), mse, "sgd", 2.0)
    out["mp-mlp-clip2"] = (model_parallel(), lambda m: Fn.mse_loss(m(xb), yb), "adam", 2.0)
    out["mp-mlp-clipinf"] = (model_parallel(), lambda m: Fn.mse_loss(m(xb), yb), "sgd", float("inf"))
    return out


def train_all(pl) -> dict:
    arrays = {}
    for name, (model, loss_fn, opt, clip) in cases(pl).items():
        params = list(model.parameters())
        if pl is not None:
            assert all(p.is_global and isinstance(p, nn.Parameter) and p.is_leaf for p in params), name
        for key, value in _train(model, OPTIMIZERS[opt](params), loss_fn, clip).items():
            arrays[f"{name}/{key}"] = value
    return arrays


def _extras(pl, rank: int) -> dict:
    """broadcast -> partial_sum keeps an inf out of the other ranks; grad_sbp; in place."""
    out = {}
    x = flow.tensor([float("inf"), 1.0, -2.0], placement=pl, sbp=B)
    p = x.to_global(sbp=flow.sbp.partial_sum)
    out["inf-local"], out["inf-logical"] = p.to_local().numpy(), p.numpy()
    # grad_sbp: where the backward's communication happens; the gradient's value is the same
    w = flow.tensor(data()["x"], placement=pl, sbp=flow.sbp.split(0), requires_grad=True)
    (w.to_global(sbp=B, grad_sbp=B) * flow.tensor(data()["x"], placement=pl, sbp=B)).sum().backward()
    out["grad_sbp-w.grad"], out["grad_sbp-sbp"] = w.grad.numpy(), str(w.grad.sbp)
    # in place: the piece is updated; copy_ converts its source's sbp
    s = flow.tensor(data()["y"], placement=pl, sbp=flow.sbp.split(0))
    with flow.no_grad():
        s.mul_(2.0).add_(flow.ones(8, 3, placement=pl, sbp=flow.sbp.split(0)))
        s.addcmul_(s, s, value=0.5)
        s.lerp_(flow.zeros(8, 3, placement=pl, sbp=flow.sbp.split(0)), 0.25)
    out["inplace"] = s.numpy()
    c = flow.zeros(8, 3, placement=pl, sbp=flow.sbp.split(1))
    c.copy_(flow.tensor(data()["y"], placement=pl, sbp=B))
    out["copy"], out["copy-sbp"] = c.numpy(), str(c.sbp)
    c.fill_(3.0)
    out["fill"] = c.numpy()
    return out


def run(rank: int, world: int) -> dict:
    pl = flow.placement("cpu", ranks=list(range(world)))
    return {**train_all(pl), **_extras(pl, rank)}


def reference() -> dict:
    return train_all(None)


def check(results: list, world: int) -> None:
    """Every rank's arrays against the single-process local training."""
    ref = reference()
    d = data()
    for rank, out in enumerate(results):
        for key, want in ref.items():
            np.testing.assert_allclose(out[key], want, rtol=1e-6, atol=1e-6, err_msg=f"rank {rank}: {key}")
        want_local = np.array([float("inf"), 1.0, -2.0]) if rank == 0 else np.zeros(3)
        np.testing.assert_array_equal(out["inf-local"], want_local)  # exact zeros, no NaN
        np.testing.assert_array_equal(out["inf-logical"], [float("inf"), 1.0, -2.0])
        np.testing.assert_allclose(out["grad_sbp-w.grad"], d["x"], rtol=1e-6)
        assert str(out["grad_sbp-sbp"]) == "(flowserve.sbp.split(dim=0),)"
        s = d["y"] * 2 + 1
        s = s + 0.5 * s * s
        np.testing.assert_allclose(out["inplace"], s * 0.75, rtol=1e-6)
        np.testing.assert_array_equal(out["copy"], d["y"])
        assert str(out["copy-sbp"]) == "(flowserve.sbp.split(dim=1),)"
        np.testing.assert_array_equal(out["fill"], np.full((8, 3), 3.0))
