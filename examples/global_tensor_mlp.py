"""Global tensors: a two-layer MLP trained with OneFlow's placement and sbp, in the two
layouts OneFlow users pick, each with a real optimizer (``flow.optim.SGD``).

    python examples/global_tensor_mlp.py                                    # one process
    python -m flowserve.distributed.launch --nproc_per_node 2 examples/global_tensor_mlp.py

- model parallel (tensor parallelism as Megatron-LM lays it out): the first layer's weight
  is split by output features (``split(0)`` of ``Linear.weight``, the columns of
  ``x @ W^T``), the second's by input features (``split(1)``): each rank computes its slice of
  the hidden layer, the second matmul gives a ``partial_sum``, and one all-reduce
  (``to_global(sbp=broadcast)``) makes the output whole;
- data parallel: ``model.to_global(placement, broadcast)`` and a ``split(0)`` batch; each
  rank's gradient pieces are all-reduced as backward reaches the weights, so every rank's
  optimizer applies the same update.

``model.parameters()`` are global Parameters after ``to_global``; the optimizer updates
each rank's piece in place. The script checks both runs' losses against the same model in
plain numpy on one process.
"""

import numpy as np

import flowserve as flow
import flowserve.nn as nn

STEPS, LR = 5, 0.1


def data():
    rng = np.random.default_rng(0)  # the same logical tensors on every rank
    x = rng.standard_normal((16, 8)).astype(np.float32)
    y = rng.standard_normal((16, 2)).astype(np.float32)
    w1 = (rng.standard_normal((8, 6)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((6, 2)) * 0.3).astype(np.float32)
    return x, y, w1, w2


def mlp(w1, w2) -> nn.Module:
    model = nn.Sequential(nn.Linear(8, 6, bias=False), nn.ReLU(), nn.Linear(6, 2, bias=False))
    with flow.no_grad():
        model[0].weight.copy_(flow.tensor(w1.T))
        model[2].weight.copy_(flow.tensor(w2.T))
    return model


def train(model, x, y, all_reduce_output: bool) -> list:
    opt = flow.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        out = model(x)
        if all_reduce_output:  # partial_sum -> broadcast: one all-reduce makes the output whole
            out = out.to_global(sbp=flow.sbp.broadcast)
        loss = (out - y).square().mean()
        loss.backward()
        opt.step()  # each rank updates its pieces of the weights
        losses.append(float(loss.numpy()))
    return losses


def train_model_parallel() -> list:
    x, y, w1, w2 = data()
    placement, b = flow.placement.all("cpu"), flow.sbp.broadcast
    model = mlp(w1, w2)
    model[0].to_global(placement, flow.sbp.split(0))  # each rank: its hidden units
    model[2].to_global(placement, flow.sbp.split(1))  # each rank: the matching inputs of layer 2
    x, y = flow.tensor(x, placement=placement, sbp=b), flow.tensor(y, placement=placement, sbp=b)
    return train(model, x, y, all_reduce_output=True)  # hidden: split(1); output: partial_sum


def train_data_parallel() -> list:
    x, y, w1, w2 = data()
    placement, s0 = flow.placement.all("cpu"), flow.sbp.split(0)
    model = mlp(w1, w2).to_global(placement, flow.sbp.broadcast)  # the whole model on every rank
    x, y = flow.tensor(x, placement=placement, sbp=s0), flow.tensor(y, placement=placement, sbp=s0)
    return train(model, x, y, all_reduce_output=False)  # output: split(0); the loss: partial_sum


def train_numpy() -> list:
    x, y, w1, w2 = (a.astype(np.float64) for a in data())
    losses = []
    for _ in range(STEPS):
        pre = x @ w1
        hidden = np.maximum(pre, 0)
        err = hidden @ w2 - y
        losses.append(float(np.mean(err ** 2)))
        d_out = 2 * err / err.size
        d_w2 = hidden.T @ d_out
        d_w1 = x.T @ ((d_out @ w2.T) * (pre > 0))
        w1, w2 = w1 - LR * d_w1, w2 - LR * d_w2
    return losses


if __name__ == "__main__":
    rank, world = flow.env.get_rank(), flow.env.get_world_size()
    expected = train_numpy()
    runs = {"model parallel": train_model_parallel(), "data parallel": train_data_parallel()}
    same = all(np.allclose(losses, expected, rtol=1e-5) for losses in runs.values())
    if rank == 0:
        for step, want in enumerate(expected):
            got = ", ".join(f"{name} {losses[step]:.6f}" for name, losses in runs.items())
            print(f"step {step}: loss {got} (numpy, one process: {want:.6f})")
        print(f"{world} process(es): losses match single-process numpy: {same}")
    if not same:
        raise SystemExit(1)
