"""``flow.env``: this process's place in a distributed run, as OneFlow spells it.

The launcher (``python -m flowserve.distributed.launch``), ``torchrun`` or a cluster's
scheduler sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``. Without them this is the only process: rank 0 of a world of 1.
``init()`` joins the others (the first collective does it when not called);
``FLOWSERVE_DIST_TIMEOUT`` (seconds, default 300) bounds the rendezvous and every
collective.

>>> import flowserve as flow
>>> flow.env.get_rank(), flow.env.get_world_size(), flow.env.get_local_rank()
(0, 1, 0)
"""

from __future__ import annotations

import atexit
import os

from flowserve.distributed.communicator import DEFAULT_TIMEOUT_S, Communicator, GlooCommunicator, LocalCommunicator
from flowserve.errors import DistributedError


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise DistributedError(f"environment variable {name} must be an integer, got {raw!r}") from None


def get_rank() -> int:
    """This process's rank among all processes (``RANK``, 0 when not launched)."""
    return _int_env("RANK", 0)


def get_world_size() -> int:
    """How many processes take part (``WORLD_SIZE``, 1 when not launched)."""
    return _int_env("WORLD_SIZE", 1)


def get_local_rank() -> int:
    """This process's rank on its node (``LOCAL_RANK``, 0 when not launched)."""
    return _int_env("LOCAL_RANK", 0)


def get_node_size() -> int:
    """How many nodes take part (``NNODES``, 1 when not launched)."""
    return _int_env("NNODES", 1)


def timeout_s() -> float:
    raw = os.environ.get("FLOWSERVE_DIST_TIMEOUT", "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise DistributedError(f"FLOWSERVE_DIST_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise DistributedError(f"FLOWSERVE_DIST_TIMEOUT must be positive, got {raw!r}")
    return value


class _ProcessGroup:
    """The process's one communicator, made by ``init()`` (one per process, as in OneFlow)."""

    communicator: Communicator | None = None


_GROUP = _ProcessGroup()


def _check_world(rank: int, world: int) -> None:
    if world < 1:
        raise DistributedError(f"WORLD_SIZE must be >= 1, got {world}")
    if not 0 <= rank < world:
        raise DistributedError(f"RANK must be in [0, {world - 1}] for WORLD_SIZE={world}, got {rank}")


def init() -> Communicator:
    """Join the other processes of the run (a no-op in a world of one, or when joined)."""
    if _GROUP.communicator is not None:
        return _GROUP.communicator
    rank, world = get_rank(), get_world_size()
    _check_world(rank, world)
    if world == 1:
        comm: Communicator = LocalCommunicator(timeout_s())
    else:
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = _int_env("MASTER_PORT", 29500)
        comm = GlooCommunicator(rank, world, addr, port, timeout_s())
        atexit.register(destroy)  # gloo's threads must stop before the interpreter does
    _GROUP.communicator = comm
    return comm


def communicator() -> Communicator:
    """The process's communicator, joining the others first if needed."""
    return _GROUP.communicator if _GROUP.communicator is not None else init()


def destroy() -> None:
    """Leave the process group (at the end of a run; ``init()`` may join again)."""
    if _GROUP.communicator is not None:
        _GROUP.communicator.close()
        _GROUP.communicator = None


def barrier() -> None:
    """Wait until every process is here."""
    communicator().barrier()
