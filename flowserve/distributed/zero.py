"""ZeRO (``graph.config.enable_zero(True, stage=1|2)``): each rank keeps and updates one
shard of the optimizer state.

The parameters of a group are one flat vector, padded to a multiple of the world size
``N`` and cut into ``N`` shards; rank ``r`` owns shard ``r``. Per step, traced into the
graph: the gradients' mean reaches each rank's shard (stage 1: ``all_reduce`` then the
rank's slice; stage 2: ``reduce_scatter``, so no rank holds the whole reduced gradient),
the optimizer's elementwise update runs on the owned shard of the parameters with the
owned shard of the state, and ``all_gather`` gives every rank all the new parameters.

The shards are graph state named ``System-Optimizer-<i>-Group-<j>-ZeRO-<state>``; the
optimizer's per-parameter state is dropped once sharded. ``graph.state_dict()`` is a
collective: every rank calls it, and the shards are gathered into the usual
per-parameter states (``model.0.weight-m``), so a checkpoint does not depend on ``N``.
"""

from __future__ import annotations

import math

import numpy as np

from flowserve.ops import collective
from flowserve.ops import functional as ops_functional
from flowserve.tensor import Tensor


def flat(tensors: list):
    """One 1-d lazy tensor holding ``tensors`` one after the other."""
    return (
        ops_functional.cat([ops_functional.reshape(t, (-1,)) for t in tensors], 0)
        if len(tensors) > 1
        else ops_functional.reshape(tensors[0], (-1,))
    )


def split_like(flat_tensor, like: list) -> list:
    """Pieces of 1-d ``flat_tensor`` shaped as ``like``, in order."""
    out, offset = [], 0
    for t in like:
        n = t.numel()
        out.append(
            ops_functional.reshape(ops_functional.slice_axis(flat_tensor, 0, offset, offset + n), tuple(t.shape))
        )
        offset += n
    return out


def _padded(flat, pad: int):
    if not pad:
        return flat
    return ops_functional.cat(
        [flat, ops_functional.expand(ops_functional.scalar_tensor(0.0, flat.dtype, flat.device), (pad,))], 0
    )


class _GroupShards:
    """The shards of one parameter group on this rank: per-element states of ``size``
    elements, and scalar states (Adam's step) shared by the group."""

    def __init__(self, opt, group: dict, params: list, rank: int, world: int):
        self.opt, self.group, self.params = opt, group, params
        self.numel = sum(p.numel() for p in params)
        self.size = math.ceil(self.numel / world)
        self.start = rank * self.size
        full = [opt.state_of(p, group) for p in params]
        self.per_element, self.scalars = {}, {}
        for key in full[0] if full else ():
            tensors = [s[key] for s in full]
            if all(tuple(t.shape) == tuple(p.shape) for t, p in zip(tensors, params)):
                flat = np.concatenate([t.numpy().reshape(-1) for t in tensors])
                flat = np.pad(flat, (0, self.size * world - self.numel))
                self.per_element[key] = Tensor._wrap(flat[self.start:self.start + self.size].copy())
            else:
                self.scalars[key] = Tensor._wrap(tensors[0].numpy().copy())  # eager, though tracing
        for p in params:
            opt.state.pop(p, None)  # the shard is the state now

    def tensors(self) -> dict:
        return {**self.per_element, **self.scalars}

    def nbytes(self) -> int:
        return sum(t.numpy().nbytes for t in self.tensors().values())

    def gather(self, comm) -> None:
        """Put the full per-parameter states back into the optimizer (a collective)."""
        gathered = {key: comm.all_gather(np.asarray(t.numpy(), order="C"))[:self.numel]
                    for key, t in self.per_element.items()}
        offset = 0
        for p in self.params:
            n = p.numel()
            state = {key: Tensor._wrap(flat[offset:offset + n].reshape(tuple(p.shape)).copy())
                     for key, flat in gathered.items()}
            state.update({key: t.detach().clone() for key, t in self.scalars.items()})
            self.opt.state[p] = state
            offset += n

    def release(self) -> None:
        for p in self.params:
            self.opt.state.pop(p, None)


class ZeroShards:
    """Every sharded group of one training graph, by its state-name prefix."""

    def __init__(self, stage: int, rank: int, world: int):
        self.stage, self.rank, self.world = stage, rank, world
        self.groups: dict[str, _GroupShards] = {}

    def states(self, tracer, opt, group: dict, prefix: str, params: list) -> dict:
        """This group's shard states, registered as graph state (made on first use)."""
        shards = self.groups.get(prefix)
        if shards is None:
            shards = self.groups[prefix] = _GroupShards(opt, group, params, self.rank, self.world)
        return {key: tracer.add_state(self._name(prefix, opt, key), t, "optimizer")
                for key, t in shards.tensors().items()}

    @staticmethod
    def _name(prefix: str, opt, key: str) -> str:
        return f"{prefix}-ZeRO-{opt.graph_state_suffix(key)}"

    def state_names(self) -> set:
        return {self._name(prefix, g.opt, key) for prefix, g in self.groups.items() for key in g.tensors()}

    def update(self, opt, group: dict, lr, items: list, states: dict) -> None:
        """Mean gradient shard, the update of the owned shard, all parameters gathered."""
        params = [lazy_p for _, lazy_p, _ in items]
        numel = sum(p.numel() for p in params)
        size = math.ceil(numel / self.world)
        pad = size * self.world - numel
        flat_g = _padded(flat([g for _, _, g in items]), pad)
        if self.stage >= 2:
            shard_g = collective.reduce_scatter(flat_g) * (1.0 / self.world)
        else:
            shard_g = ops_functional.slice_axis(collective.all_reduce(flat_g) * (1.0 / self.world), 0, self.rank * size,
                                   (self.rank + 1) * size)
        shard_p = ops_functional.slice_axis(_padded(flat(params), pad), 0, self.rank * size, (self.rank + 1) * size)
        opt._update(shard_p, shard_g, states, group, lr)
        for p, new in zip(params, split_like(ops_functional.slice_axis(collective.all_gather(shard_p), 0, 0, numel), params)):
            p.copy_(new)

    def state_bytes(self) -> tuple[int, int]:
        """(bytes of optimizer state this rank holds, bytes of the whole unsharded state)."""
        mine = sum(g.nbytes() for g in self.groups.values())
        full = sum(sum(t.numpy().itemsize for t in g.per_element.values()) * g.numel
                   + sum(t.numpy().nbytes for t in g.scalars.values()) for g in self.groups.values())
        return mine, full

    def gather(self, comm) -> None:
        for shards in self.groups.values():
            shards.gather(comm)

    def release(self) -> None:
        for shards in self.groups.values():
            shards.release()
