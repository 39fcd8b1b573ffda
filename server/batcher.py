"""Dynamic batching: merge queued requests along the batch axis, split the results.

The batcher knows nothing of models or protocols. It holds a bounded queue of
pending requests (one future each) and one worker per instance; a free worker
takes the oldest request plus every later one of the same non-batch shape, up
to ``max_batch_size`` rows, waiting at most ``max_queue_delay_s`` after the
oldest arrived for the batch to reach the preferred size, runs the batch in
its own thread, and splits the outputs back by the recorded row counts. A
failure is set on every future of the batch. A single instance whose batches
take less than ``inline_below_s`` runs them on the event loop itself: a thread
hop costs more than such a batch (~100 µs)::

    batcher = DynamicBatcher([runner.run], max_batch_size=64, max_queue_delay_s=0.0005)
    await batcher.start()
    outputs = await batcher.submit({"x": x}, rows=1)
    await batcher.stop()
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import time
from typing import Callable, Optional

import numpy as np

from .errors import InferenceFailedError, QueueFullError, RequestTimeoutError, ServerError

RunBatch = Callable[[dict], dict]


@dataclasses.dataclass
class BatchRecord:
    """What one executed batch did, reported to the ``on_batch`` callback."""

    rows: int
    requests: int
    queue_s: list[float]
    compute_s: float
    failed: bool


@dataclasses.dataclass
class _Pending:
    inputs: dict
    rows: int
    signature: tuple
    future: asyncio.Future
    enqueued: float
    deadline: Optional[float]


class DynamicBatcher:
    """Bounded request queue plus one worker per ``run_batch`` callable (instance)."""

    def __init__(self, runners: list[RunBatch], *, max_batch_size: int,
                 max_queue_delay_s: float = 0.0, preferred_batch_sizes: tuple = (),
                 max_queue_size: int = 1024, on_batch: Callable[[BatchRecord], None] = None,
                 inline_below_s: float = 0.0005):
        self._runners = list(runners)
        self.max_batch_size = max(1, max_batch_size)
        self.max_queue_delay_s = max_queue_delay_s
        self._target = max(preferred_batch_sizes, default=self.max_batch_size)
        self.max_queue_size = max_queue_size
        self._on_batch = on_batch or (lambda record: None)
        self._queue: collections.deque[_Pending] = collections.deque()
        self._wakeup: Optional[asyncio.Event] = None
        self._workers: list[asyncio.Task] = []
        self._executors: list[concurrent.futures.ThreadPoolExecutor] = []
        self._closing = False
        self._inline_below_s = inline_below_s if len(self._runners) == 1 else 0.0
        self._compute_ema_s = float("inf")

    @property
    def queued(self) -> int:
        """Requests waiting for a worker."""
        return len(self._queue)

    async def start(self) -> None:
        """Start one worker task (and thread) per instance on the running loop."""
        self._wakeup = asyncio.Event()
        for index, runner in enumerate(self._runners):
            executor = concurrent.futures.ThreadPoolExecutor(1, f"flowserve-instance-{index}")
            self._executors.append(executor)
            self._workers.append(asyncio.create_task(self._work(runner, executor)))

    async def stop(self) -> None:
        """Finish queued requests, then stop the workers and their threads."""
        self._closing = True
        if self._wakeup is not None:
            self._wakeup.set()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for executor in self._executors:
            executor.shutdown(wait=True)
        self._workers, self._executors = [], []

    async def submit(self, inputs: dict, rows: int, timeout_s: Optional[float] = None) -> dict:
        """Queue one request of ``rows`` rows; its outputs once its batch ran."""
        if self._closing:
            raise QueueFullError("the model is shutting down; not accepting requests")
        if len(self._queue) >= self.max_queue_size:
            raise QueueFullError(
                f"queue full: {self.max_queue_size} requests waiting; retry later"
            )
        now = time.monotonic()
        signature = tuple((name, array.shape[1:], array.dtype.str) for name, array in inputs.items())
        pending = _Pending(
            inputs, rows, signature, asyncio.get_running_loop().create_future(), now,
            now + timeout_s if timeout_s else None,
        )
        self._queue.append(pending)
        self._wakeup.set()
        return await pending.future

    async def _work(self, runner: RunBatch, executor) -> None:
        while True:
            batch = await self._next_batch()
            if batch is None:
                return
            await self._execute(runner, executor, batch)

    async def _next_batch(self) -> Optional[list[_Pending]]:
        while True:
            self._drop_expired()
            if self._queue:
                if not self._closing and self._should_wait():
                    await self._wait(self._queue[0].enqueued + self.max_queue_delay_s)
                    continue
                return self._take_batch()
            if self._closing:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()

    def _should_wait(self) -> bool:
        if self.max_queue_delay_s <= 0:
            return False
        oldest = self._queue[0]
        if time.monotonic() >= oldest.enqueued + self.max_queue_delay_s:
            return False
        rows = sum(p.rows for p in self._queue if p.signature == oldest.signature)
        return rows < self._target

    async def _wait(self, until: float) -> None:
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), max(0.0, until - time.monotonic()))
        except asyncio.TimeoutError:
            pass

    def _drop_expired(self) -> None:
        now = time.monotonic()
        if not any(p.deadline is not None and p.deadline <= now for p in self._queue):
            return
        kept = collections.deque()
        for pending in self._queue:
            if pending.deadline is not None and pending.deadline <= now:
                waited_us = int((now - pending.enqueued) * 1e6)
                _settle(pending.future, exc=RequestTimeoutError(
                    f"request timed out after {waited_us} µs in the queue"))
            else:
                kept.append(pending)
        self._queue = kept

    def _take_batch(self) -> list[_Pending]:
        head = self._queue.popleft()
        batch, rows, skipped = [head], head.rows, collections.deque()
        while self._queue and rows < self.max_batch_size:
            pending = self._queue.popleft()
            if pending.signature == head.signature and rows + pending.rows <= self.max_batch_size:
                batch.append(pending)
                rows += pending.rows
            else:
                skipped.append(pending)
        skipped.extend(self._queue)
        self._queue = skipped
        return batch

    async def _execute(self, runner: RunBatch, executor, batch: list[_Pending]) -> None:
        started = time.monotonic()
        queue_s = [started - p.enqueued for p in batch]
        loop = asyncio.get_running_loop()
        failed = True
        try:
            inputs = _concatenate([p.inputs for p in batch])
            if self._compute_ema_s < self._inline_below_s:
                outputs = runner(inputs)
            else:
                outputs = await loop.run_in_executor(executor, runner, inputs)
            for pending, part in zip(batch, _split(outputs, [p.rows for p in batch])):
                _settle(pending.future, result=part)
            failed = False
        except ServerError as exc:
            for pending in batch:
                _settle(pending.future, exc=exc)
        except Exception as exc:  # a runner bug must not hang its requests
            error = InferenceFailedError(f"batch failed: {type(exc).__name__}: {exc}")
            for pending in batch:
                _settle(pending.future, exc=error)
        rows = sum(p.rows for p in batch)
        compute_s = time.monotonic() - started
        ema = self._compute_ema_s
        self._compute_ema_s = compute_s if ema == float("inf") else 0.9 * ema + 0.1 * compute_s
        self._on_batch(BatchRecord(rows, len(batch), queue_s, compute_s, failed))


def _concatenate(requests: list[dict]) -> dict:
    if len(requests) == 1:
        return requests[0]
    return {name: np.concatenate([r[name] for r in requests]) for name in requests[0]}


def _split(outputs: dict, rows: list[int]) -> list[dict]:
    if len(rows) == 1:
        return [outputs]
    total = sum(rows)
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise InferenceFailedError(
                f"output {name!r} has shape {list(array.shape)}, not a batch of {total} rows; "
                "the model cannot be batched (set max_batch_size 0)"
            )
    offsets = np.cumsum(rows)[:-1]
    parts = {name: np.split(array, offsets) for name, array in outputs.items()}
    return [{name: parts[name][i] for name in outputs} for i in range(len(rows))]


def _settle(future: asyncio.Future, result=None, exc: BaseException = None) -> None:
    if future.done():  # the caller went away (cancelled)
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
