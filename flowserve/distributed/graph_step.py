"""What a training ``nn.Graph`` does in a run of several processes, traced into its step.

``DataParallelStep.of(graph)`` is ``None`` in a world of one process. Otherwise the
graph's optimizer update (``flowserve.nn.graph.update``) hands it the local gradients,
and it records their mean over the ranks: the gradients of a dtype are flattened into
buckets of at most ``bucket_cap_mb``, each bucket one ``all_reduce``. The compiled graph
then runs in segments between the collectives (``flowserve.distributed.segments``).
"""

from __future__ import annotations

from flowserve import dtypes, env
from flowserve.distributed.buckets import DEFAULT_BUCKET_CAP_MB, bucket_indices
from flowserve.distributed.zero import ZeroShards, flat, split_like
from flowserve.ops import collective
from flowserve.ops import functional as ops_functional
def traced_mean(grads: list, world: int, cap_bytes: int) -> list:
    """The mean over the ranks of lazy ``grads``: per dtype, bucketed ``all_reduce``s."""
    out: list = [None] * len(grads)
    by_dtype: dict = {}
    for i, g in enumerate(grads):
        by_dtype.setdefault(g.dtype.name, []).append(i)
    for indices in by_dtype.values():
        sizes = [grads[i].numel() * grads[i].dtype.itemsize for i in indices]
        for bucket in bucket_indices(sizes, cap_bytes):
            members = [indices[j] for j in bucket]
            mean = collective.all_reduce(flat([grads[i] for i in members])) * (1.0 / world)
            for i, g in zip(members, split_like(mean, [grads[i] for i in members])):
                out[i] = g
    return out


class DataParallelStep:
    """The distributed part of one training graph's step over ``world_size`` processes:
    gradient reduction, or with ZeRO the sharded update (``flowserve.distributed.zero``).
    Made once per graph (``graph.parts.parallel``), so the ZeRO shards outlive re-traces."""

    def __init__(self, world_size: int, rank: int, zero: dict | None = None,
                 bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB):
        self.world_size, self.rank = world_size, rank
        self.cap_bytes = int(bucket_cap_mb * (1 << 20))
        self.zero = ZeroShards(zero["stage"], rank, world_size) if zero and zero.get("enabled") else None

    @classmethod
    def of(cls, graph) -> "DataParallelStep | None":
        world = env.get_world_size()
        if not graph.training or world == 1:
            return None
        if any(gm.stage_id is not None for gm in graph.graph_modules().values()):
            return None  # pipeline stages: each rank holds its stage (flowserve.distributed.pipeline)
        parts = graph.parts
        if parts.parallel is None:
            parts.parallel = cls(world, env.get_rank(), graph.config.options.get("zero"))
        return parts.parallel

    def reduce_gradients(self, work: list) -> list:
        """``work`` as ``update._gradients`` makes it, its gradients replaced by their mean
        (with ZeRO, the sharded update reduces them itself)."""
        grads = [g for *_, items in work for _, _, g in items]
        if not grads or self.zero is not None:
            return work
        means = iter(traced_mean(grads, self.world_size, self.cap_bytes))
        return [(*head, [(p, lazy_p, next(means)) for p, lazy_p, _ in items]) for *head, items in work]

    def agree(self, flag):
        """A boolean every rank computed from its own gradients, true where any rank's is."""
        if self.zero is None:
            return flag  # computed from reduced gradients: the same everywhere
        return ops_functional.gt(collective.all_reduce(ops_functional.cast(flag, dtypes.float32)), 0.0)

    def rank_local_state(self) -> set:
        """Names of the graph state that differs between ranks (the ZeRO shards)."""
        return self.zero.state_names() if self.zero is not None else set()

    def gather_state(self) -> None:
        """Before ``graph.state_dict()``: full optimizer states from the ZeRO shards."""
        if self.zero is not None:
            self.zero.gather(env.communicator())

    def release_state(self) -> None:
        if self.zero is not None:
            self.zero.release()
