"""Global-tensor cases run by every rank (``run``), and their check against numpy and PyTorch
on the logical tensors (``check``): the same cases in one process and in a launched run."""

from __future__ import annotations

import numpy as np
import torch

import flowserve as flow

SBPS = {"S0": flow.sbp.split(0), "S1": flow.sbp.split(1), "B": flow.sbp.broadcast, "P": flow.sbp.partial_sum}


def data() -> dict:
    rng = np.random.default_rng(0)  # the same logical tensors on every rank
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {"A": f(5, 4), "W": f(4, 3), "V": f(3, 4), "bias": f(4), "C": f(5, 4), "img": f(3, 2, 5, 5),
            "kernel": f(4, 2, 3, 3), "kbias": f(4)}


def pieces(array: np.ndarray, dim: int, world: int) -> list:
    return np.array_split(array, world, axis=dim)


def _from(logical: np.ndarray, key: str, world: int, rank: int, requires_grad: bool = False):
    """A global tensor of ``logical`` in sbp ``key``, built from this rank's piece."""
    pl = flow.placement("cpu", ranks=list(range(world)))
    s = SBPS[key]
    if s.is_split:
        local = pieces(logical, s.dim, world)[rank]
    elif s.is_partial:  # any split of the value into summands: rank r holds (r + 1) / sum * value
        local = logical * (rank + 1) / (world * (world + 1) / 2)
    else:
        local = logical
    t = flow.tensor(np.ascontiguousarray(local), requires_grad=requires_grad)
    return t, t.to_global(placement=pl, sbp=s)


def _errors(d: dict, pl) -> dict:
    msgs = {}
    a = flow.tensor(d["A"], placement=pl, sbp=flow.sbp.split(0))
    cases = {
        "relu_of_partial": lambda: a.to_global(sbp=flow.sbp.partial_sum).relu(),
        "matmul_s0_s0": lambda: a @ flow.tensor(d["W"], placement=pl, sbp=flow.sbp.split(0)),
        "local_meets_global": lambda: a + flow.ones(5, 4),
        "other_placement": lambda: a.to_global(placement=flow.placement("cpu", ranks=[0, 1, 2, 3, 4, 5])),
    }
    for name, fn in cases.items():
        try:
            fn()
            msgs[name] = "no error"
        except Exception as exc:  # noqa: BLE001 - the message is what is checked
            msgs[name] = f"{type(exc).__name__}: {exc}"
    return msgs


def run(rank: int, world: int) -> tuple[dict, dict]:
    """Every case on this rank: arrays by name, and error messages."""
    d, out = data(), {}
    pl = flow.placement("cpu", ranks=list(range(world)))
    # creation from the logical value, and local -> global from this rank's piece
    for key in SBPS:
        g = flow.tensor(d["A"], placement=pl, sbp=SBPS[key])
        out[f"create-{key}-local"], out[f"create-{key}-numpy"] = g.to_local().numpy(), g.numpy()
        _, h = _from(d["A"], key, world, rank)
        out[f"from-{key}-numpy"], out[f"from-{key}-shape"] = h.numpy(), np.array(h.shape)
    out["bcast-from-rank0"] = flow.tensor(np.full(3, rank + 1.0, np.float32)).to_global(pl, flow.sbp.broadcast).numpy()
    out["randn-S0"] = flow.randn(6, 2, placement=pl, sbp=flow.sbp.split(0)).numpy()
    # boxing between every pair of sbps
    for src in SBPS:
        for dst in SBPS:
            _, g = _from(d["A"], src, world, rank)
            b = g.to_global(sbp=SBPS[dst])
            out[f"box-{src}-{dst}-local"], out[f"box-{src}-{dst}-numpy"] = b.to_local().numpy(), b.numpy()
    # ops whose sbp is inferred, with gradients through them
    xa, x = _from(d["A"], "S0", world, rank, requires_grad=True)
    # a broadcast leaf is made global directly (local.to_global(broadcast) sends rank 0's value: not a leaf)
    w = flow.tensor(d["W"], placement=pl, sbp=flow.sbp.broadcast, requires_grad=True)
    b = flow.tensor(d["bias"], placement=pl, sbp=flow.sbp.broadcast, requires_grad=True)
    ca, c = _from(d["C"], "S0", world, rank, requires_grad=True)
    h = (x + b).relu() * c - x / 2.0  # S0 with a broadcast bias sliced to the rows
    y = h @ w  # S0 x B -> S0
    loss = (y.tanh().sum() + y.mean(dim=1).sum() * 0.5) / 3.0  # sum over the split dim -> P
    loss.backward()
    out.update({"h": h.numpy(), "y": y.numpy(), "loss": loss.numpy(), "x.grad": x.grad.numpy(),
                "w.grad": w.grad.numpy(), "b.grad": b.grad.numpy(), "c.grad": c.grad.numpy(),
                "x.grad.local": xa.grad.numpy()})
    out["sbp-h"], out["sbp-y"], out["sbp-loss"] = str(h.sbp), str(y.sbp), str(loss.sbp)
    out["sbp-w.grad"] = str(w.grad.sbp)
    # broadcast x split(col) -> split(col); split(k) x split(k) -> partial_sum, then its gradient
    va, v = _from(d["V"], "S1", world, rank, requires_grad=True)
    z = flow.tensor(d["A"], placement=pl, sbp=flow.sbp.broadcast)
    col = z.transpose(0, 1) @ flow.tensor(d["C"], placement=pl, sbp=flow.sbp.split(1))  # (4,5)x(5,4)
    out["col"], out["sbp-col"] = col.numpy(), str(col.sbp)
    k_split = flow.tensor(d["A"], placement=pl, sbp=flow.sbp.split(1)) @ v.transpose(0, 1) * 1.0
    out["contract"], out["sbp-contract"] = k_split.numpy(), str(k_split.sbp)
    loss2 = k_split.to_global(sbp=flow.sbp.broadcast).square().sum()  # a broadcast loss
    loss2.backward()
    out["v.grad"], out["loss2"] = v.grad.numpy(), loss2.numpy()
    out.update(_batch_ops(d, pl))
    # a classifier's loss on a split batch: partial_sum, the mean's divisor all-reduced
    ea, e = _from(d["A"], "S0", world, rank, requires_grad=True)
    labels = flow.tensor(np.array([0, 3, 1, 2, 3]), placement=pl, sbp=flow.sbp.split(0))
    ce = flow.nn.functional.cross_entropy(e, labels)
    ce.backward()
    square = e.sum() * e.sum()  # P * P: the second factor is all-reduced first
    out.update({"ce": ce.numpy(), "ce.grad": e.grad.numpy(), "sbp-ce": str(ce.sbp), "square": square.numpy()})
    return out, _errors(d, pl)


def _batch_ops(d: dict, pl) -> dict:
    """A convnet's forward on a split(0) batch with broadcast weights: every result stays split."""
    F = flow.nn.functional
    x = flow.tensor(d["img"], placement=pl, sbp=flow.sbp.split(0))
    k = flow.tensor(d["kernel"], placement=pl, sbp=flow.sbp.broadcast)
    kb = flow.tensor(d["kbias"], placement=pl, sbp=flow.sbp.broadcast)
    conv = F.conv2d(x, k, kb, padding=1)
    pooled = F.max_pool2d(conv, 2)
    flat = pooled.flatten(1)
    res = {"conv": conv, "pooled": pooled, "flat": flat, "softmax": flat.softmax(dim=1),
           "argmax": flat.argmax(dim=1), "cat": flow.cat([flat, flat * 2], dim=1),
           "permute": conv.permute(0, 2, 3, 1), "batch_mean": flat.mean(dim=0)}
    out = {f"batch-{name}": t.numpy() for name, t in res.items()}
    out.update({f"batch-sbp-{name}": str(t.sbp) for name, t in res.items()})
    return out


def _torch(a) -> torch.Tensor:
    return torch.tensor(a, requires_grad=True)


def reference() -> dict:
    d = data()
    x, w, b, c = _torch(d["A"]), _torch(d["W"]), _torch(d["bias"]), _torch(d["C"])
    h = torch.relu(x + b) * c - x / 2.0
    y = h @ w
    loss = (torch.tanh(y).sum() + y.mean(dim=1).sum() * 0.5) / 3.0
    loss.backward()
    v = _torch(d["V"])
    contract = torch.tensor(d["A"]) @ v.T
    loss2 = contract.square().sum()
    loss2.backward()
    conv = torch.nn.functional.conv2d(torch.tensor(d["img"]), torch.tensor(d["kernel"]), torch.tensor(d["kbias"]),
                                      padding=1)
    flat = torch.nn.functional.max_pool2d(conv, 2).flatten(1)
    batch = {"conv": conv, "pooled": torch.nn.functional.max_pool2d(conv, 2), "flat": flat,
             "softmax": flat.softmax(dim=1), "argmax": flat.argmax(dim=1), "cat": torch.cat([flat, flat * 2], 1),
             "permute": conv.permute(0, 2, 3, 1), "batch_mean": flat.mean(dim=0)}
    e = _torch(d["A"])
    ce = torch.nn.functional.cross_entropy(e, torch.tensor([0, 3, 1, 2, 3]))
    ce.backward()
    extra = {"ce": ce, "ce.grad": e.grad, "square": torch.tensor(d["A"]).sum() ** 2}
    return {**{f"batch-{k}": v for k, v in batch.items()}, **extra, "h": h, "y": y, "loss": loss, "x.grad": x.grad,
            "w.grad": w.grad, "b.grad": b.grad, "c.grad": c.grad,
            "col": torch.tensor(d["A"]).T @ torch.tensor(d["C"]), "contract": contract, "v.grad": v.grad,
            "loss2": loss2}


def check(results: list, world: int) -> None:
    """``results[r]`` is rank r's ``run`` output (arrays, errors)."""
    d, ref = data(), reference()
    a = d["A"]
    for rank, (out, errors) in enumerate(results):
        where = f"rank {rank} of {world}"
        for key, s in SBPS.items():
            np.testing.assert_array_equal(out[f"create-{key}-numpy"], a, err_msg=f"{where} create {key}")
            np.testing.assert_allclose(out[f"from-{key}-numpy"], a, rtol=1e-6, atol=1e-6, err_msg=f"{where} {key}")
            assert tuple(out[f"from-{key}-shape"]) == a.shape
            expected_local = pieces(a, s.dim, world)[rank] if s.is_split else (
                a if s.is_broadcast or rank == 0 else np.zeros_like(a))
            np.testing.assert_array_equal(out[f"create-{key}-local"], expected_local, err_msg=f"{where} {key}")
            for src in SBPS:  # boxing keeps the logical value and lays the piece out as dst says
                np.testing.assert_allclose(out[f"box-{src}-{key}-numpy"], a, rtol=1e-6, atol=1e-6,
                                           err_msg=f"{where} {src}->{key}")
                local = out[f"box-{src}-{key}-local"]
                if s.is_split or s.is_broadcast:
                    np.testing.assert_allclose(local, expected_local, rtol=1e-6, atol=1e-6,
                                               err_msg=f"{where} {src}->{key} piece")
                else:
                    assert local.shape == a.shape
        np.testing.assert_array_equal(out["bcast-from-rank0"], np.full(3, 1.0, np.float32))  # rank 0's value
        np.testing.assert_array_equal(out["randn-S0"], results[0][0]["randn-S0"])  # one logical draw
        for key, expected in ref.items():
            np.testing.assert_allclose(out[key], expected.detach().numpy(), rtol=1e-5, atol=1e-5,
                                       err_msg=f"{where} {key}")
        np.testing.assert_allclose(out["x.grad.local"], pieces(ref["x.grad"].numpy(), 0, world)[rank],
                                   rtol=1e-5, atol=1e-5)
        assert out["sbp-h"] == out["sbp-y"] == "(flowserve.sbp.split(dim=0),)"
        assert out["sbp-loss"] == out["sbp-contract"] == "(flowserve.sbp.partial_sum,)"
        assert out["sbp-w.grad"] == "(flowserve.sbp.broadcast,)"  # a leaf's gradient has its sbp (OneFlow's)
        assert out["sbp-col"] == "(flowserve.sbp.split(dim=1),)"
        for name in ("conv", "pooled", "flat", "softmax", "argmax", "cat", "permute"):
            assert out[f"batch-sbp-{name}"] == "(flowserve.sbp.split(dim=0),)", name
        assert out["batch-sbp-batch_mean"] == out["sbp-ce"] == "(flowserve.sbp.partial_sum,)"
        assert "relu on global tensors: the sbp combination (flowserve.sbp.partial_sum) is not supported" in \
            errors["relu_of_partial"] and "to_global(sbp=flow.sbp.broadcast)" in errors["relu_of_partial"]
        assert "matmul on global tensors: the sbp combination (flowserve.sbp.split(dim=0), " \
            "flowserve.sbp.split(dim=0))" in errors["matmul_s0_s0"]
        assert "a local tensor of size (5, 4) meets a global tensor" in errors["local_meets_global"]
        assert "moving a global tensor from" in errors["other_placement"]
