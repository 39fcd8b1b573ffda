"""Global tensors: a two-layer MLP trained with its weights split over the processes
(tensor parallelism as Megatron-LM lays it out), written on OneFlow's placement and sbp.

    python examples/global_tensor_mlp.py                                    # one process
    python -m flowserve.distributed.launch --nproc_per_node 2 examples/global_tensor_mlp.py

The first layer's weight is split by columns (``split(1)``), the second's by rows
(``split(0)``): each rank computes its slice of the hidden layer, the second matmul gives a
``partial_sum``, and one all-reduce (``to_global(sbp=broadcast)``) makes the output whole.
Gradients flow back through the same pieces. The script trains a few SGD steps and checks
the losses against the same model in plain numpy on one process.
"""

import numpy as np

import flowserve as flow

STEPS, LR = 5, 0.1


def data():
    rng = np.random.default_rng(0)  # the same logical tensors on every rank
    x = rng.standard_normal((16, 8)).astype(np.float32)
    y = rng.standard_normal((16, 2)).astype(np.float32)
    w1 = (rng.standard_normal((8, 6)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((6, 2)) * 0.3).astype(np.float32)
    return x, y, w1, w2


def train_global() -> list:
    x, y, w1, w2 = data()
    placement = flow.placement.all("cpu")
    b, s0, s1 = flow.sbp.broadcast, flow.sbp.split(0), flow.sbp.split(1)
    x, y = flow.tensor(x, placement=placement, sbp=b), flow.tensor(y, placement=placement, sbp=b)
    w1 = flow.tensor(w1, placement=placement, sbp=s1, requires_grad=True)  # columns on each rank
    w2 = flow.tensor(w2, placement=placement, sbp=s0, requires_grad=True)  # rows on each rank
    losses = []
    for _ in range(STEPS):
        hidden = (x @ w1).relu()  # broadcast x split(1) -> split(1): each rank its hidden units
        out = hidden @ w2  # split(1) x split(0) -> partial_sum
        loss = (out.to_global(sbp=b) - y).square().mean()  # one all-reduce, then a broadcast loss
        loss.backward()
        losses.append(float(loss.numpy()))
        with flow.no_grad():  # the gradients have the weights' sbps: each rank updates its piece
            w1 = (w1 - LR * w1.grad).detach().requires_grad_()
            w2 = (w2 - LR * w2.grad).detach().requires_grad_()
    return losses


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
    losses = train_global()
    expected = train_numpy()
    if rank == 0:
        for step, (got, want) in enumerate(zip(losses, expected)):
            print(f"step {step}: loss {got:.6f} (numpy, one process: {want:.6f})")
        same = np.allclose(losses, expected, rtol=1e-5)
        print(f"{world} process(es): losses match single-process numpy: {same}")
        if not same:
            raise SystemExit(1)
