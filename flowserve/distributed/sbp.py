"""``flow.sbp`` and ``flow.placement``: how a global tensor's logical value lies on the ranks,
as OneFlow spells it.

- ``flow.sbp.split(dim)``: each rank holds one piece of the logical tensor along ``dim``
  (pieces in rank order; sizes as ``numpy.array_split`` gives them, so the first ranks get
  one more row when the size does not divide);
- ``flow.sbp.broadcast`` (or ``flow.sbp.broadcast()``, as OneFlow code also writes it): every
  rank holds the whole logical tensor;
- ``flow.sbp.partial_sum``: every rank holds a tensor of the logical shape, and the logical
  value is their elementwise sum.

``flow.placement("cpu", ranks=[0, 1])`` (or ``type=``, ``ranks=``; ``flow.placement.all("cpu")``
for every rank) names the processes a global tensor spans.

>>> import flowserve as flow
>>> flow.sbp.split(0), flow.sbp.broadcast, flow.sbp.partial_sum()
(flowserve.sbp.split(dim=0), flowserve.sbp.broadcast, flowserve.sbp.partial_sum)
>>> flow.placement("cpu", ranks=[0])
flowserve.placement(type="cpu", ranks=[0])
"""

from __future__ import annotations

import numpy as np

from flowserve import env
from flowserve.errors import DistributedError

DEVICE_TYPES = ("cpu", "cuda")


class sbp:  # noqa: N801 - OneFlow's class name, flow.sbp.sbp
    """One of ``split(dim)``, ``broadcast``, ``partial_sum`` (compare with ``==``)."""

    __slots__ = ("kind", "dim")

    def __init__(self, kind: str, dim: int | None = None):
        self.kind, self.dim = kind, dim

    @property
    def is_split(self) -> bool:
        return self.kind == "split"

    @property
    def is_broadcast(self) -> bool:
        return self.kind == "broadcast"

    @property
    def is_partial(self) -> bool:
        return self.kind == "partial_sum"

    def __call__(self) -> "sbp":
        """``flow.sbp.broadcast()`` is ``flow.sbp.broadcast`` (OneFlow accepts both spellings)."""
        return self

    def __eq__(self, other) -> bool:
        return isinstance(other, sbp) and (self.kind, self.dim) == (other.kind, other.dim)

    def __hash__(self) -> int:
        return hash((self.kind, self.dim))

    def __repr__(self) -> str:
        return f"flowserve.sbp.split(dim={self.dim})" if self.is_split else f"flowserve.sbp.{self.kind}"


def split(dim: int) -> sbp:
    """Each rank holds its piece of the logical tensor along ``dim``."""
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or dim < 0:
        raise DistributedError(f"flow.sbp.split expects a dimension >= 0, got {dim!r}")
    return sbp("split", int(dim))


broadcast = sbp("broadcast")
partial_sum = sbp("partial_sum")


def as_sbp(value, where: str) -> sbp:
    """One ``sbp`` from ``value``: an sbp, or a list/tuple holding one (OneFlow's nd-SBP of a
    1-d placement)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise DistributedError(
                f"{where}: expected one sbp (flowserve's placements are 1-d, so an sbp tuple has one entry), "
                f"got {len(value)}: {tuple(value)}")
        value = value[0]
    if not isinstance(value, sbp):
        raise DistributedError(f"{where}: expected flow.sbp.split(dim), flow.sbp.broadcast or "
                               f"flow.sbp.partial_sum, got {value!r}")
    return value


def split_sizes(size: int, world: int) -> list[int]:
    """The piece of a dimension of ``size`` on each of ``world`` ranks (array_split's sizes)."""
    base, extra = divmod(int(size), world)
    return [base + (1 if r < extra else 0) for r in range(world)]


def split_start(size: int, world: int, rank: int) -> int:
    return sum(split_sizes(size, world)[:rank])


class placement:  # noqa: N801 - OneFlow's class name, flow.placement
    """The ranks a global tensor spans and their device type.

    ``flow.placement("cpu", ranks=[0, 1])``, ``flow.placement(type="cuda", ranks=[0, 1])``,
    ``flow.placement.all("cpu")``. flowserve's global tensors span every process of the run,
    so ``ranks`` must be ``0 .. world_size - 1``.
    """

    __slots__ = ("type", "ranks")

    def __init__(self, type: str = None, ranks=None):  # noqa: A002 - OneFlow's argument name
        if type not in DEVICE_TYPES:
            raise DistributedError(f"flow.placement: type must be one of {DEVICE_TYPES}, got {type!r}")
        if isinstance(ranks, dict):
            raise DistributedError("flow.placement: the {machine: [devices]} form is OneFlow's old one; "
                                   "give ranks=[0, 1, ...]")
        if ranks is None:
            raise DistributedError("flow.placement: ranks= is required (for example ranks=[0, 1]); "
                                   "flow.placement.all(type) spans every rank")
        ranks = list(ranks)
        if any(isinstance(r, (list, tuple)) for r in ranks):
            raise DistributedError(f"flow.placement: ranks {ranks} form a 2-d hierarchy; flowserve's placements "
                                   "are 1-d: give a flat list of ranks")
        self.type, self.ranks = type, [int(r) for r in ranks]

    @classmethod
    def all(cls, device_type: str) -> "placement":  # noqa: A003 - OneFlow's name
        """Every rank of the run, on ``device_type``."""
        return cls(device_type, list(range(env.get_world_size())))

    @property
    def hierarchy(self) -> list[int]:
        return [len(self.ranks)]

    def check_spans_world(self, where: str) -> None:
        world = env.get_world_size()
        if self.ranks != list(range(world)):
            raise DistributedError(
                f"{where}: placement ranks {self.ranks} do not match the run's ranks {list(range(world))}; "
                "flowserve's global tensors span every process (use flow.placement.all("
                f"{self.type!r}) or launch {len(self.ranks)} processes)")

    def __eq__(self, other) -> bool:
        return isinstance(other, placement) and (self.type, self.ranks) == (other.type, other.ranks)

    def __hash__(self) -> int:
        return hash((self.type, tuple(self.ranks)))

    def __repr__(self) -> str:
        return f'flowserve.placement(type="{self.type}", ranks={self.ranks})'
