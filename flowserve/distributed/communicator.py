"""The ``Communicator``: the collectives data parallelism, ZeRO and pipelines need.

Arrays are contiguous numpy buffers, reduced in place where the collective allows
(no copies on CPU). ``LocalCommunicator`` is the world of one process;
``GlooCommunicator`` runs gloo through ``torch.distributed`` (rendezvous at
``MASTER_ADDR:MASTER_PORT``, every collective bounded by ``timeout``). An NCCL or MPI
engine sits behind the same interface.

>>> import numpy as np
>>> comm = LocalCommunicator()
>>> comm.allreduce(np.ones(3, np.float32)).tolist()
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod

import numpy as np

from flowserve.errors import DistributedError

DEFAULT_TIMEOUT_S = 300.0


class Handle:
    """An asynchronous collective: ``wait()`` returns its result."""

    def __init__(self, wait, result):
        self._wait, self._result = wait, result

    def wait(self):
        if self._wait is not None:
            self._wait()
            self._wait = None
        return self._result


class Communicator(ABC):
    """Collectives over ``world_size`` processes; this one is ``rank``."""

    rank: int = 0
    world_size: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S

    @abstractmethod
    def allreduce_async(self, array: np.ndarray) -> Handle:
        """Sum ``array`` over all ranks, in place; ``wait()`` returns it."""

    def allreduce(self, array: np.ndarray) -> np.ndarray:
        """Sum ``array`` over all ranks, in place."""
        return self.allreduce_async(array).wait()

    @abstractmethod
    def reduce_scatter(self, array: np.ndarray) -> np.ndarray:
        """Sum over ranks of a 1-d ``array`` of ``world_size * k`` elements; this rank gets
        elements ``[rank*k, (rank+1)*k)`` of the sum."""

    @abstractmethod
    def all_gather(self, shard: np.ndarray) -> np.ndarray:
        """The concatenation (along dim 0) of every rank's ``shard``, in rank order."""

    @abstractmethod
    def broadcast(self, array: np.ndarray, src: int = 0) -> np.ndarray:
        """Overwrite ``array`` with rank ``src``'s, in place."""

    @abstractmethod
    def barrier(self) -> None:
        """Wait until every rank is here."""

    @abstractmethod
    def send(self, array: np.ndarray, dst: int, tag: int = 0) -> Handle:
        """Start sending a copy of ``array`` to rank ``dst`` (which receives it with ``recv``
        and the same ``tag``); ``wait()`` on the handle returns when it has left."""

    @abstractmethod
    def recv(self, array: np.ndarray, src: int, tag: int = 0) -> np.ndarray:
        """Receive into ``array`` (shape and dtype as sent) from rank ``src``."""

    def close(self) -> None:
        """Leave the process group."""


def _check_shardable(array: np.ndarray, world: int, op: str) -> int:
    if array.ndim != 1 or array.size % world:
        raise DistributedError(f"{op} expects a 1-d array whose size divides by the world size {world}, "
                               f"got shape {array.shape}")
    return array.size // world


class LocalCommunicator(Communicator):
    """The world of one process: every collective returns its input."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.timeout_s = timeout_s

    def allreduce_async(self, array):
        return Handle(None, array)

    def reduce_scatter(self, array):
        _check_shardable(array, 1, "reduce_scatter")
        return array.copy()

    def all_gather(self, shard):
        return shard.copy()

    def broadcast(self, array, src=0):
        return array

    def barrier(self):
        return None

    def send(self, array, dst, tag=0):
        raise DistributedError(f"send to rank {dst}: this process is the only rank (world size 1)")

    def recv(self, array, src, tag=0):
        raise DistributedError(f"recv from rank {src}: this process is the only rank (world size 1)")


class GlooCommunicator(Communicator):
    """gloo through ``torch.distributed``: TCP rendezvous at ``master_addr:master_port``,
    ``torch.from_numpy`` views of the numpy buffers (no copies), ``timeout_s`` on every
    collective. A peer that dies fails the pending collective at once (its sockets close);
    one that hangs fails it after ``timeout_s``."""

    def __init__(self, rank: int, world_size: int, master_addr: str, master_port: int,
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        from torch import distributed as dist, from_numpy  # local: the optional engine, multi-process only

        self.rank, self.world_size, self.timeout_s = rank, world_size, float(timeout_s)
        self._from_numpy, self._dist = from_numpy, dist
        where = f"{master_addr}:{master_port}"
        timeout = datetime.timedelta(seconds=self.timeout_s)
        try:
            store = dist.TCPStore(master_addr, master_port, world_size, is_master=rank == 0,
                                  timeout=timeout, wait_for_workers=True)
            dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
        except Exception as exc:  # torch raises DistStoreError, RuntimeError, ValueError, ...
            raise DistributedError(_rendezvous_message(rank, world_size, where, self.timeout_s, exc)) from None
        self._group = dist.group.WORLD

    def _t(self, array: np.ndarray):
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise DistributedError(f"collectives need a writable contiguous array, got shape {array.shape}")
        return self._from_numpy(array)

    def _run(self, op: str, fn):
        try:
            return fn()
        except Exception as exc:
            raise DistributedError(_collective_message(op, self.rank, self.timeout_s, exc)) from None

    def allreduce_async(self, array):
        work = self._run("allreduce", lambda: self._dist.all_reduce(self._t(array), async_op=True))
        return Handle(lambda: self._run("allreduce", work.wait), array)

    def reduce_scatter(self, array):
        k = _check_shardable(array, self.world_size, "reduce_scatter")
        # gloo has no reduce_scatter: the sum arrives everywhere and each rank keeps its slice
        self.allreduce(array)
        return array[self.rank * k:(self.rank + 1) * k].copy()

    def all_gather(self, shard):
        shard = np.asarray(shard, order="C")
        out = np.empty((self.world_size * shard.shape[0],) + shard.shape[1:], shard.dtype)
        parts = [self._from_numpy(p) for p in np.split(out, self.world_size)]
        self._run("all_gather", lambda: self._dist.all_gather(parts, self._t(shard.copy())))
        return out

    def broadcast(self, array, src=0):
        self._run("broadcast", lambda: self._dist.broadcast(self._t(array), src))
        return array

    def barrier(self):
        self._run("barrier", lambda: self._dist.barrier())

    def send(self, array, dst, tag=0):
        data = np.array(array, copy=True, order="C")
        work = self._run(f"send to rank {dst}", lambda: self._dist.isend(self._t(data), dst, tag=tag))
        return Handle(lambda: self._run(f"send to rank {dst}", work.wait), data)

    def recv(self, array, src, tag=0):
        self._run(f"recv from rank {src}", lambda: self._dist.recv(self._t(array), src, tag=tag))
        return array

    def close(self):
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _rendezvous_message(rank: int, world: int, where: str, timeout_s: float, exc: Exception) -> str:
    detail = _first_line(exc)
    if rank == 0 and ("address already in use" in detail.lower() or "EADDRINUSE" in detail):
        return f"rank 0 cannot listen on {where}: the port is in use (choose another --master_port)"
    if rank == 0:
        return (f"rank 0 waited {timeout_s:g} s at {where} for {world} ranks and not all of them joined "
                f"(is WORLD_SIZE={world} right, did every rank start?): {detail}")
    return (f"rank {rank} could not join the {world} ranks at master {where} within {timeout_s:g} s "
            f"(is the master reachable, is WORLD_SIZE={world} right?): {detail}")


def _collective_message(op: str, rank: int, timeout_s: float, exc: Exception) -> str:
    detail = _first_line(exc)
    low = detail.lower()
    if "timed out" in low or "timeout" in low:
        why = f"no answer from the other ranks within the {timeout_s:g} s collective timeout"
    elif "closed" in low or "reset" in low or "broken pipe" in low or "connection" in low:
        why = "a peer rank is gone (its connection closed)"
    else:
        why = "the collective failed"
    return f"{op} on rank {rank}: {why}: {detail}"
