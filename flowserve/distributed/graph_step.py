"""What a training ``nn.Graph`` does in a run of several processes, traced into its step.

``DataParallelStep.of(graph)`` is ``None`` in a world of one process. Otherwise the
graph's optimizer update (``flowserve.nn.graph.update``) hands it the local gradients,
and it records their mean over the ranks: the gradients of a dtype are flattened into
buckets of at most ``bucket_cap_mb``, each bucket one ``all_reduce``. The compiled graph
then runs in segments between the collectives (``flowserve.distributed.segments``).
"""

from __future__ import annotations

from flowserve import env
from flowserve.distributed.buckets import DEFAULT_BUCKET_CAP_MB, bucket_indices
from flowserve.ops import collective as C
from flowserve.ops import functional as F


def _flat(tensors: list):
    return F.cat([F.reshape(t, (-1,)) for t in tensors], 0) if len(tensors) > 1 else F.reshape(tensors[0], (-1,))


def _split_like(flat, like: list) -> list:
    out, offset = [], 0
    for t in like:
        n = t.numel()
        out.append(F.reshape(F.slice_axis(flat, 0, offset, offset + n), tuple(t.shape)))
        offset += n
    return out


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
            flat = C.all_reduce(_flat([grads[i] for i in members])) * (1.0 / world)
            for i, g in zip(members, _split_like(flat, [grads[i] for i in members])):
                out[i] = g
    return out


class DataParallelStep:
    """Gradient reduction of one training graph over ``world_size`` processes."""

    def __init__(self, world_size: int, bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB):
        self.world_size = world_size
        self.cap_bytes = int(bucket_cap_mb * (1 << 20))

    @classmethod
    def of(cls, graph) -> "DataParallelStep | None":
        world = env.get_world_size()
        if not graph.training or world == 1:
            return None
        return cls(world)

    def reduce_gradients(self, work: list) -> list:
        """``work`` as ``update._gradients`` makes it, its gradients replaced by their mean."""
        grads = [g for *_, items in work for _, _, g in items]
        if not grads:
            return work
        means = iter(traced_mean(grads, self.world_size, self.cap_bytes))
        return [(*head, [(p, lazy_p, next(means)) for p, lazy_p, _ in items]) for *head, items in work]
