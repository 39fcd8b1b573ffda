"""Dynamic batching: merge queued requests along the batch axis, split the results.

The batcher knows nothing of models or protocols. It holds a bounded queue of
pending requests (one future each) and one worker per instance; a free worker
takes the oldest request plus every later one of the same non-batch shape, up
to ``max_batch_size`` rows, waiting at most ``max_queue_delay_s`` after the
oldest arrived for the batch to reach the preferred size, runs the batch in
its own thread, and splits the outputs back by the recorded row counts. A
failure is set on every future of the batch. A single instance whose batches
take less than ``inline_below_s`` runs them on the event loop itself: a thread
hop costs more than such a batch (~100 µs).

The wait is adaptive: the batcher keeps a moving share of the requests that arrived
while another was in flight (queued or running). When few did (a lone client sending
one request after the other's answer), no company can come within the delay, so a
request is taken at once instead of waiting ``max_queue_delay_s`` for nothing. Under
load most arrivals find others in flight, the share rises within a few requests and
batches wait to fill as before; requests that pile up while a batch runs merge either
way, so a burst still forms full batches. While no company is expected, every
``PROBE_EVERY``-th batch waits anyway: an event loop too busy to read the next request
before it answers the last one serves many clients one request at a time, none finding
another in flight, and the arrivals during a probe's wait lift the share again. Each
probe that finds no company doubles the interval to the next, up to ``PROBE_EVERY_MAX``;
company (in a probe's wait, or the share rising) sets it back to ``PROBE_EVERY``. A
request taken at once still goes through the queue (not the direct path below): run on
the event loop, a burst would be answered one request at a time, each finding nothing in
flight, and the share would never rise.

A request that finds the model idle (nothing queued, the instance free, no
other request in the last ``direct_after_idle_s``) while the batcher would not
wait for company anyway (no queue delay, or already the preferred size) runs at
once on the event loop, without the queue and worker hand-off: it would have
formed a batch of its own. Under load requests arrive closer together than that
and go through the queue, where they merge.

With ``wide_narrow`` (the CPU policy of the same name), ``runners[0]`` is one session
using every core and each later runner a narrow session: single-threaded, one per core
(on many cores, fewer sessions of several threads each). Runs hold tokens, one per narrow
runner: a wide run takes them all, a narrow run one, and a run starts only on free
tokens, so the sessions never ask for more cores than there are. A lone request on idle
cores runs wide (fastest alone); when more is queued or a run is in flight, batches run
narrow (single-threaded sessions do more per second under load). A narrow batch takes its
share of the rows queued or running on the narrow sessions: a session that frees up while
the others run small batches does not take every queued row, which would put the oldest
requests behind the compute of later ones that another session, soon free, could run
beside them::

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
SMALL_BATCH_BYTES = 1 << 16
COMPANY_WEIGHT = 1 / 8  # weight of the newest arrival in the share that found company
WAIT_FOR_COMPANY_ABOVE = 0.25  # the share above which a batch waits for company
PROBE_EVERY = 8  # while no company is expected, every 8th batch still waits (a probe) ...
PROBE_EVERY_MAX = 64  # ... each probe that finds none doubles the interval, up to this


@dataclasses.dataclass
class BatchRecord:
    """What one executed batch did, reported to the ``on_batch`` callback."""

    rows: int
    requests: int
    queue_s: list[float]
    compute_s: float  # all of it: inputs merged, the run, outputs split
    failed: bool
    input_s: float = 0.0  # merging the requests' inputs into one batch
    infer_s: float = 0.0  # the runner itself
    output_s: float = 0.0  # splitting the outputs back into the requests
    instance: int = 0  # index of the runner that ran it


@dataclasses.dataclass
class _Instance:
    """One runner, the worker thread it runs on, and the core tokens a run holds."""

    index: int
    run: RunBatch
    executor: concurrent.futures.ThreadPoolExecutor
    cores: int


@dataclasses.dataclass
class _Pending:
    inputs: dict
    rows: int
    signature: tuple
    future: asyncio.Future
    enqueued: float
    deadline: Optional[float]


class DynamicBatcher:
    """Bounded request queue plus one worker per ``run_batch`` callable (instance);
    with ``wide_narrow``, ``runners[0]`` uses every core and the others one each."""

    def __init__(self, runners: list[RunBatch], *, max_batch_size: int,
                 max_queue_delay_s: float = 0.0, preferred_batch_sizes: tuple = (),
                 max_queue_size: int = 1024, on_batch: Callable[[BatchRecord], None] = None,
                 inline_below_s: float = 0.0005, direct_after_idle_s: float = 0.0001,
                 wide_narrow: bool = False):
        self._runners = list(runners)
        if wide_narrow and len(self._runners) < 3:
            raise ValueError(f"wide_narrow needs a wide runner and at least two narrow ones, "
                             f"got {len(self._runners)} runners")
        self.wide_narrow = wide_narrow
        self._cores = len(self._runners) - 1 if wide_narrow else len(self._runners)
        self._cores_busy = 0  # core tokens the running batches hold
        self._rows_running = 0  # rows of the batches running
        self.max_batch_size = max(1, max_batch_size)
        self.max_queue_delay_s = max_queue_delay_s
        self._target = max(preferred_batch_sizes, default=self.max_batch_size)
        self.max_queue_size = max_queue_size
        self._on_batch = on_batch or (lambda record: None)
        self._queue: collections.deque[_Pending] = collections.deque()
        self._wakeup: Optional[asyncio.Event] = None
        self._workers: list[asyncio.Task] = []
        self._instances: list[_Instance] = []
        self._closing = False
        self._inline_below_s = inline_below_s if len(self._runners) == 1 else 0.0
        self._compute_ema_s = float("inf")
        self._input_ema_bytes = 1.0
        self._direct_after_idle_s = direct_after_idle_s
        self._last_arrival = float("-inf")
        self._idle_workers = 0
        self._in_flight = 0  # requests queued or running, not yet answered
        self._company = 0.0  # moving share of arrivals that found another request in flight
        self._unwaited = 0  # batches taken at once since the last probe
        self._probe_every = PROBE_EVERY  # batches taken at once before the next probe
        self._probe: Optional[_Pending] = None  # the head a probe waits with
        self.probes = 0  # waits made although no company was expected

    @property
    def queued(self) -> int:
        """Requests waiting for a worker."""
        return len(self._queue)

    @property
    def expects_company(self) -> bool:
        """Whether recent arrivals found other requests in flight often enough that a
        batch waits ``max_queue_delay_s`` for more (a lone client's never do)."""
        return self._company > WAIT_FOR_COMPANY_ABOVE

    async def start(self) -> None:
        """Start one worker task (and thread) per instance on the running loop."""
        self._wakeup = asyncio.Event()
        for index, runner in enumerate(self._runners):
            executor = concurrent.futures.ThreadPoolExecutor(1, f"flowserve-instance-{index}")
            executor.submit(int)  # start its thread now, not in the first batch's time
            cores = self._cores if self.wide_narrow and index == 0 else 1
            instance = _Instance(index, runner, executor, cores)
            self._instances.append(instance)
            self._workers.append(asyncio.create_task(self._work(instance)))

    async def stop(self) -> None:
        """Finish queued requests, then stop the workers and their threads."""
        self._closing = True
        if self._wakeup is not None:
            self._wakeup.set()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for instance in self._instances:
            instance.executor.shutdown(wait=True)
        self._workers, self._instances = [], []

    async def submit(self, inputs: dict, rows: int, timeout_s: Optional[float] = None) -> dict:
        """Queue one request of ``rows`` rows; its outputs once its batch ran."""
        if self._closing:
            raise QueueFullError("the model is shutting down; not accepting requests")
        if len(self._queue) >= self.max_queue_size:
            raise QueueFullError(
                f"queue full: {self.max_queue_size} requests waiting; retry later"
            )
        now = time.monotonic()
        last_arrival, self._last_arrival = self._last_arrival, now
        found = 1.0 if self._in_flight else 0.0
        self._company += COMPANY_WEIGHT * (found - self._company)
        if self._runs_direct(rows, now - last_arrival, _nbytes(inputs)):
            return self._run_direct(inputs, rows)
        signature = tuple((name, array.shape[1:], array.dtype.str) for name, array in inputs.items())
        pending = _Pending(
            inputs, rows, signature, asyncio.get_running_loop().create_future(), now,
            now + timeout_s if timeout_s else None,
        )
        self._queue.append(pending)
        self._wakeup.set()
        self._in_flight += 1
        try:
            return await pending.future
        except asyncio.CancelledError:  # the caller went away (reset stream, deadline): drop its work
            self._queue = collections.deque(p for p in self._queue if p is not pending)
            raise
        finally:
            self._in_flight -= 1

    def _runs_direct(self, rows: int, idle_s: float, nbytes: int) -> bool:
        return (
            not self._queue
            and self._idle_workers == len(self._runners)
            and self._runs_inline(nbytes)
            and idle_s >= self._direct_after_idle_s
            and (self.max_queue_delay_s <= 0 or rows >= self._target)
        )

    def _runs_inline(self, nbytes: int) -> bool:
        """Whether a batch of ``nbytes`` input bytes is expected to take less than
        ``inline_below_s``: the average compute time, scaled up for inputs larger than both
        the average and ``SMALL_BATCH_BYTES`` (a heavy request never runs on the event loop
        because light ones did; small batches cost about the same whatever their size)."""
        if self._compute_ema_s >= self._inline_below_s:
            return False
        scale = nbytes / max(self._input_ema_bytes, SMALL_BATCH_BYTES)
        return self._compute_ema_s * max(1.0, scale) < self._inline_below_s

    def _run_direct(self, inputs: dict, rows: int) -> dict:
        """Run a lone request on the loop now: a batch of one, without the queue."""
        started = time.monotonic()
        outputs, error, timings = _run_guarded(self._runners[0], [inputs])
        self._record(rows, 1, [0.0], started, error is not None, _nbytes(inputs), timings)
        if error is not None:
            raise error
        return outputs

    async def _work(self, instance: _Instance) -> None:
        while True:
            batch = await self._next_batch(instance)
            if batch is None:
                return
            try:
                await self._execute(instance, batch)
            finally:
                self._cores_busy -= instance.cores
                self._rows_running -= sum(p.rows for p in batch)
                if self.wide_narrow:  # freed tokens: an instance that had to wait may run now
                    self._wakeup.set()

    async def _next_batch(self, instance: _Instance) -> Optional[list[_Pending]]:
        """The next batch ``instance`` runs (its core tokens taken), or None once stopping
        with nothing queued."""
        while True:
            self._drop_expired()
            if self._queue and self._may_run(instance):
                if not self._closing and self._should_wait():
                    await self._wait(self._queue[0].enqueued + self.max_queue_delay_s)
                    continue
                if self._probe is not None:  # a probe's wait is over: did company come?
                    self._probe_found(len(self._queue) > 1 or self.expects_company)
                self._probe = None
                self._cores_busy += instance.cores
                batch = self._take_batch(self._rows_for(instance))
                self._rows_running += sum(p.rows for p in batch)
                return batch
            if self._closing and not self._queue:
                return None
            self._wakeup.clear()
            self._idle_workers += 1
            try:
                await self._wakeup.wait()
            finally:
                self._idle_workers -= 1

    def _may_run(self, instance: _Instance) -> bool:
        """Whether ``instance`` takes the queue's next batch now: always, unless
        ``wide_narrow``; then only on free core tokens, the wide instance for a lone request
        on idle cores, a narrow one for anything else."""
        if not self.wide_narrow:
            return True
        if instance.cores > self._cores - self._cores_busy:
            return False
        lone = self._cores_busy == 0 and len(self._queue) == 1
        return (instance.index == 0) == lone

    def _rows_for(self, instance: _Instance) -> int:
        """The most rows a batch of ``instance`` takes: ``max_batch_size``, or for a narrow
        run of ``wide_narrow`` its share of the rows queued and running (on the others:
        a wide run never overlaps a narrow one) among all the narrow sessions. Taking every
        queued row while the others run short batches would put the oldest request in a
        batch as long as the whole queue, and the next session to free up, finding the
        queue empty, would run later arrivals first; with a share, the session back first
        takes the next oldest rows (FIFO across batches). On idle sessions the queue is
        shared evenly, as the rows each takes count as running for the next."""
        if not self.wide_narrow or instance.index == 0:
            return self.max_batch_size
        rows = sum(p.rows for p in self._queue) + self._rows_running
        return max(1, min(self.max_batch_size, -(-rows // (len(self._runners) - 1))))

    def _should_wait(self) -> bool:
        if self.max_queue_delay_s <= 0:
            return False
        oldest = self._queue[0]
        if time.monotonic() >= oldest.enqueued + self.max_queue_delay_s:
            return False
        rows = sum(p.rows for p in self._queue if p.signature == oldest.signature)
        if rows >= self._target:
            return False
        if self.expects_company:
            self._probe_every = PROBE_EVERY  # company came: probe often again once it goes
            return True
        if oldest is self._probe:
            return True
        # A probe: when a busy event loop answers requests one at a time, none finds another
        # in flight, though many clients wait; requests that arrive while a probe waits do
        # find it, and lift the share again
        self._unwaited += 1
        if self._unwaited < self._probe_every:
            return False
        self._unwaited, self._probe = 0, oldest
        self.probes += 1
        return True

    def _probe_found(self, company: bool) -> None:
        """After a probe's wait: back to every ``PROBE_EVERY``-th batch if company came, else
        twice as far apart (up to ``PROBE_EVERY_MAX``): a lone client settles at paying the
        delay once in 64 requests, not 8."""
        self._probe_every = PROBE_EVERY if company else min(2 * self._probe_every, PROBE_EVERY_MAX)

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

    def _take_batch(self, max_rows: int) -> list[_Pending]:
        """The oldest request and every later one of its signature, up to ``max_rows`` rows
        (the oldest alone when it has more)."""
        head = self._queue.popleft()
        batch, rows, skipped = [head], head.rows, collections.deque()
        while self._queue and rows < max_rows:
            pending = self._queue.popleft()
            if pending.signature == head.signature and rows + pending.rows <= max_rows:
                batch.append(pending)
                rows += pending.rows
            else:
                skipped.append(pending)
        skipped.extend(self._queue)
        self._queue = skipped
        return batch

    async def _execute(self, instance: _Instance, batch: list[_Pending]) -> None:
        started = time.monotonic()
        queue_s = [started - p.enqueued for p in batch]
        requests = [p.inputs for p in batch]
        nbytes = sum(_nbytes(inputs) for inputs in requests)
        if self._runs_inline(nbytes):
            outputs, error, timings = _run_guarded(instance.run, requests)
        else:
            loop = asyncio.get_running_loop()
            outputs, error, timings = await loop.run_in_executor(
                instance.executor, _run_guarded, instance.run, requests)
        if error is None:
            split_started = time.monotonic()
            try:
                parts = _split(outputs, [p.rows for p in batch])
            except ServerError as exc:
                error = exc
            timings = (*timings[:2], time.monotonic() - split_started)
        if error is not None:
            for pending in batch:
                _settle(pending.future, exc=error)
        else:
            for pending, part in zip(batch, parts):
                _settle(pending.future, result=part)
        self._record(sum(p.rows for p in batch), len(batch), queue_s, started, error is not None,
                     nbytes, timings, instance.index)

    def _record(self, rows: int, requests: int, queue_s: list, started: float,
                failed: bool, nbytes: int, timings: tuple, instance: int = 0) -> None:
        compute_s = time.monotonic() - started
        # what decides inline runs is the batch's own work, timed where it ran: a thread
        # hop (or a busy loop) in compute_s would keep small batches off the loop for good
        work_s = sum(timings)
        first = self._compute_ema_s == float("inf")
        self._compute_ema_s = work_s if first else 0.9 * self._compute_ema_s + 0.1 * work_s
        nbytes = max(1.0, float(nbytes))
        self._input_ema_bytes = nbytes if first else 0.9 * self._input_ema_bytes + 0.1 * nbytes
        self._on_batch(BatchRecord(rows, requests, queue_s, compute_s, failed, *timings, instance))


def _nbytes(inputs: dict) -> int:
    return sum(array.nbytes for array in inputs.values())


def _run_guarded(runner: RunBatch, requests: list[dict]):
    """``(outputs, None, timings)`` of the merged ``requests``, or ``(None, error, timings)``;
    ``timings`` are the seconds spent merging inputs and running (outputs: 0 so far).

    A runner bug must not hang its requests: every exception becomes an error.
    """
    started = time.monotonic()
    merged = started
    try:
        batch = _concatenate(requests)
        merged = time.monotonic()
        return runner(batch), None, (merged - started, time.monotonic() - merged, 0.0)
    except ServerError as exc:
        error = exc
    except Exception as exc:
        error = InferenceFailedError(f"batch failed: {type(exc).__name__}: {exc}")
    return None, error, (merged - started, time.monotonic() - merged, 0.0)


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
