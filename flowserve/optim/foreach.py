"""The eager multi-tensor update (PyTorch's ``foreach`` path) of SGD and Adam/AdamW.

The functional ``_update`` (what nn.Graph compiles) costs, in eager mode, one dispatched
op and one full-size temporary per arithmetic step per parameter: a ResNet-18 SGD step
streamed ~20 arrays of 45 MB through memory. Here the same arithmetic, in the same order
and with the same float32 roundings, runs as numpy ufuncs over cache-sized chunks of each
parameter with ``out=`` into a few scratch buffers, and writes parameters and states in
place: each array is read and written once per step.

In place means into arrays this optimizer allocated itself: an array a tensor got from
elsewhere (``p.data = x``, ``copy_``, loading, an nn.Graph call) may be shared, so the
first update writes a fresh array and only later updates reuse it ("copy on write").
As in PyTorch, a ``p.detach()`` taken before ``step()`` then sees the new value.

>>> import flowserve as flow
>>> w = flow.nn.Parameter(flow.ones(3))
>>> opt = flow.optim.SGD([w], lr=0.5, momentum=0.9, foreach=True)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w.tolist()
[0.0, 0.0, 0.0]
"""

from __future__ import annotations

import os
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from flowserve.dispatch import current_trace
from flowserve.tensor import Tensor
from flowserve.utils.cpus import usable_cpus

CHUNK = 1 << 16  # elements per ufunc call (256 KB of float32): the scratch chunks stay in cache
TASK = 1 << 20  # elements per task of the thread pool (numpy's ufuncs release the GIL)
THREADS = min(usable_cpus(), 8)
_POOL: dict = {}  # pid -> the ThreadPoolExecutor of that process (a forked child makes its own)
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def usable(group: dict, params: list) -> bool:
    """Whether ``group``'s update can take the fused path: eager numpy float32/float64
    parameters and gradients of the same dtype and shape, and a Python-number ``lr``."""
    if group.get("foreach") is False or current_trace() is not None or isinstance(group["lr"], Tensor):
        return False
    for p in params:
        g = p.grad
        if getattr(p, "is_global", False) or type(p._data) is not np.ndarray or p._data.dtype not in _DTYPES:
            return False
        if type(g._data) is not np.ndarray or g._data.dtype != p._data.dtype or g._data.shape != p._data.shape:
            return False
    return True


class Writer:
    """Where an update writes each tensor: its own array when the optimizer allocated it
    (in place), else a fresh one that the tensor takes after the update."""

    def __init__(self, owned: dict):
        self.owned = owned  # id(tensor) -> weak reference to the array this optimizer gave it
        self.pending: list = []

    def target(self, t: Tensor) -> tuple[np.ndarray, np.ndarray]:
        """``(source, destination)`` flat views of ``t``'s value (the same array when owned)."""
        data = t._data
        src = data.reshape(-1)
        ref = self.owned.get(id(t))
        if ref is not None and ref() is data and data.flags.writeable and data.flags.c_contiguous:
            return src, src
        fresh = np.empty(data.shape, dtype=data.dtype)
        self.pending.append((t, fresh))
        return src, fresh.reshape(-1)

    def commit(self, tensors: list) -> None:
        """Give fresh arrays to their tensors; every written tensor's version advances."""
        for t, fresh in self.pending:
            t._data = fresh
            self.owned[id(t)] = weakref.ref(fresh)
        self.pending = []
        for t in tensors:
            t._set_value(t._data)  # shared with its detach() aliases


def run(jobs: list) -> None:
    """Run ``(kernel, views, args)`` jobs, ``kernel(views, *args)`` over equal-length 1-D
    ``views``, split into tasks of about ``TASK`` elements on ``THREADS`` threads."""
    tasks, task, size = [], [], 0
    for kernel, views, args in jobs:
        n = views[0].size
        for start in range(0, n, TASK):
            task.append((kernel, [v[start:start + TASK] for v in views], args))
            size += min(TASK, n - start)
            if size >= TASK:
                tasks.append(task)
                task, size = [], 0
    tasks += [task] if task else []
    if THREADS < 2 or len(tasks) < 2:
        for task in tasks:
            _run_task(task)
        return
    pool = _POOL.get(os.getpid())
    if pool is None:
        _POOL.clear()
        pool = _POOL[os.getpid()] = ThreadPoolExecutor(THREADS, thread_name_prefix="flowserve-foreach")
    for _ in pool.map(_run_task, tasks):  # re-raises a kernel's error here
        pass


def _run_task(task: list) -> None:
    for kernel, views, args in task:
        kernel(views, *args)


def chunks(n: int):
    for start in range(0, n, CHUNK):
        yield slice(start, min(start + CHUNK, n))


def scalar_step(t: Tensor, value=None) -> float:
    """Advance a 0-d counter by one (or set it to ``value``); returns the new value."""
    dtype = t._data.dtype
    t._set_value(np.asarray(t._data + dtype.type(1) if value is None else value, dtype=dtype))
    return float(t._data)
