"""DynamicBatcher on its own: merging, splitting, failures, bounds, timeouts."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from flowserve.server.batcher import PROBE_EVERY, PROBE_EVERY_MAX, DynamicBatcher
from flowserve.server.errors import InferenceFailedError, QueueFullError, RequestTimeoutError


class RecordingRunner:
    """Doubles ``x`` row-wise and records every batch size it ran."""

    def __init__(self, delay_s: float = 0.0):
        self.batches, self.delay_s = [], delay_s

    def __call__(self, inputs):
        if self.delay_s:
            time.sleep(self.delay_s)
        self.batches.append(len(inputs["x"]))
        return {"y": inputs["x"] * 2, "z": inputs["x"].sum(axis=1)}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_merges_requests_and_splits_results_back_in_order():
    runner = RecordingRunner(delay_s=0.01)

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=32, max_queue_delay_s=0.05)
        await batcher.start()
        xs = [np.full((rows, 2), i, np.float32) for i, rows in enumerate([1, 3, 2, 1] * 4)]
        results = await asyncio.gather(*(batcher.submit({"x": x}, len(x)) for x in xs))
        await batcher.stop()
        return xs, results

    xs, results = run(main())
    for x, result in zip(xs, results):
        np.testing.assert_array_equal(result["y"], x * 2)
        np.testing.assert_array_equal(result["z"], x.sum(axis=1))
    assert sum(runner.batches) == sum(len(x) for x in xs)
    assert max(runner.batches) > 3  # requests really were merged


def test_never_exceeds_max_batch_size():
    runner = RecordingRunner()

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=4, max_queue_delay_s=0.02)
        await batcher.start()
        await asyncio.gather(*(batcher.submit({"x": np.ones((3, 2))}, 3) for _ in range(10)))
        await batcher.stop()

    run(main())
    assert max(runner.batches) <= 4 and sum(runner.batches) == 30


def test_requests_of_other_shapes_are_not_merged():
    runner = RecordingRunner()

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=64, max_queue_delay_s=0.02)
        await batcher.start()
        shapes = [(1, 2), (1, 5)] * 5
        results = await asyncio.gather(*(batcher.submit({"x": np.ones(s)}, 1) for s in shapes))
        await batcher.stop()
        return shapes, results

    shapes, results = run(main())
    assert [r["y"].shape for r in results] == shapes
    assert sorted(runner.batches) == [5, 5]


def test_failure_is_set_on_every_waiting_future():
    def failing(inputs):
        raise InferenceFailedError("runtime exploded")

    async def main():
        batcher = DynamicBatcher([failing], max_batch_size=8, max_queue_delay_s=0.02)
        await batcher.start()
        outcomes = await asyncio.gather(
            *(batcher.submit({"x": np.ones((1, 2))}, 1) for _ in range(5)),
            return_exceptions=True)
        await batcher.stop()
        return outcomes

    outcomes = run(main())
    assert all(isinstance(o, InferenceFailedError) for o in outcomes)


def test_unexpected_exception_in_runner_fails_requests_instead_of_hanging():
    def buggy(inputs):
        raise KeyError("bug")

    async def main():
        batcher = DynamicBatcher([buggy], max_batch_size=8)
        await batcher.start()
        with pytest.raises(InferenceFailedError, match="KeyError"):
            await batcher.submit({"x": np.ones((1, 2))}, 1)
        await batcher.stop()

    run(main())


def test_full_queue_refuses_with_queue_full_error():
    gate = threading.Event()

    def blocked(inputs):
        gate.wait(10)
        return {"y": inputs["x"]}

    async def main():
        batcher = DynamicBatcher([blocked], max_batch_size=1, max_queue_size=3,
                                 inline_below_s=0)
        await batcher.start()
        first = asyncio.create_task(batcher.submit({"x": np.ones((1, 1))}, 1))
        await asyncio.sleep(0.05)  # the worker holds the first request
        queued = [asyncio.create_task(batcher.submit({"x": np.ones((1, 1))}, 1))
                  for _ in range(3)]
        await asyncio.sleep(0.01)
        with pytest.raises(QueueFullError, match="queue full"):
            await batcher.submit({"x": np.ones((1, 1))}, 1)
        gate.set()
        await asyncio.gather(first, *queued)
        await batcher.stop()

    run(main())


def test_request_timeout_in_queue():
    gate = threading.Event()

    def blocked(inputs):
        gate.wait(10)
        return {"y": inputs["x"]}

    async def main():
        batcher = DynamicBatcher([blocked], max_batch_size=1, inline_below_s=0)
        await batcher.start()
        first = asyncio.create_task(batcher.submit({"x": np.ones((1, 1))}, 1))
        await asyncio.sleep(0.05)
        late = asyncio.create_task(batcher.submit({"x": np.ones((1, 1))}, 1, timeout_s=0.01))
        await asyncio.sleep(0.05)
        gate.set()
        await first
        with pytest.raises(RequestTimeoutError, match="timed out"):
            await late
        await batcher.stop()

    run(main())


def test_several_instances_run_batches_in_parallel():
    active, peak, lock = [0], [0], threading.Lock()

    def slow(inputs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return {"y": inputs["x"]}

    async def main():
        batcher = DynamicBatcher([slow, slow], max_batch_size=1)
        await batcher.start()
        await asyncio.gather(*(batcher.submit({"x": np.ones((1, 1))}, 1) for _ in range(4)))
        await batcher.stop()

    run(main())
    assert peak[0] == 2


def test_stop_finishes_queued_requests():
    runner = RecordingRunner(delay_s=0.01)

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=2)
        await batcher.start()
        tasks = [asyncio.create_task(batcher.submit({"x": np.ones((1, 1))}, 1))
                 for _ in range(6)]
        await asyncio.sleep(0)
        await batcher.stop()
        return await asyncio.gather(*tasks)

    assert len(run(main())) == 6


async def warm(batcher: DynamicBatcher) -> None:
    """Requests one after another until the batcher has learnt the compute time."""
    for _ in range(20):
        await batcher.submit({"x": np.ones((1, 2))}, 1)


def test_lone_request_on_an_idle_model_runs_at_once_without_the_queue():
    runner, records = RecordingRunner(), []

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=8, on_batch=records.append)
        await batcher.start()
        await warm(batcher)
        await asyncio.sleep(0.01)  # the model is idle now
        pending = batcher.submit({"x": np.full((1, 2), 3.0)}, 1)
        with pytest.raises(StopIteration) as finished:  # done without ever suspending
            pending.send(None)
        await batcher.stop()
        return finished.value.value

    result = run(main())
    np.testing.assert_array_equal(result["y"], np.full((1, 2), 6.0))
    assert runner.batches[-1] == 1 and records[-1].queue_s == [0.0]


def test_requests_close_together_go_through_the_queue_and_merge():
    runner = RecordingRunner()

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=64)
        await batcher.start()
        await warm(batcher)
        await asyncio.sleep(0.01)
        before = len(runner.batches)
        xs = [np.full((1, 2), i, np.float32) for i in range(16)]
        results = await asyncio.gather(*(batcher.submit({"x": x}, 1) for x in xs))
        await batcher.stop()
        return xs, results, runner.batches[before:]

    xs, results, batches = run(main())
    for x, result in zip(xs, results):
        np.testing.assert_array_equal(result["y"], x * 2)
    # the first runs alone on the idle path; the rest queue up behind it and merge (on a
    # loaded machine one more may still find the model idle)
    assert batches[0] == 1 and sum(batches) == 16 and max(batches) >= 8, batches


def test_a_lone_client_is_not_kept_waiting_for_company():
    """One request after the other's answer: none ever finds another in flight, so none
    waits the (here hour-long) queue delay for company that cannot come, up to the
    next probe."""
    runner, records = RecordingRunner(), []

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=8, max_queue_delay_s=3600,
                                 on_batch=records.append)
        await batcher.start()
        results = [await batcher.submit({"x": np.full((1, 2), i, np.float32)}, 1)
                   for i in range(PROBE_EVERY - 1)]
        expects, probes = batcher.expects_company, batcher.probes
        await batcher.stop()
        return results, expects, probes

    results, expects, probes = run(main())
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result["y"], np.full((1, 2), 2 * i))
    assert not expects and probes == 0
    assert runner.batches == [1] * (PROBE_EVERY - 1)
    assert [r.requests for r in records] == [1] * (PROBE_EVERY - 1)


def test_a_probe_finds_clients_that_arrive_one_at_a_time():
    """Requests that each arrive after the previous one was answered, though not from one
    client: every ``PROBE_EVERY``-th batch still waits, the arrivals during that wait find
    it in flight, and the batcher goes back to waiting for company and merging."""
    runner = RecordingRunner()

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=8, max_queue_delay_s=0.2)
        await batcher.start()
        tasks = []
        for _ in range(6 * PROBE_EVERY):
            tasks.append(asyncio.ensure_future(batcher.submit({"x": np.ones((1, 2))}, 1)))
            await asyncio.sleep(0.01)  # the last one is answered by now, unless held
        await asyncio.gather(*tasks)
        expects, probes = batcher.expects_company, batcher.probes
        await batcher.stop()
        return expects, probes

    expects, probes = run(main())
    assert probes >= 1 and expects
    assert runner.batches[:PROBE_EVERY - 1] == [1] * (PROBE_EVERY - 1)
    assert max(runner.batches) > 1 and sum(runner.batches) == 6 * PROBE_EVERY


def _probe_intervals(count: int) -> list:
    """The batches between probes for a lone client: doubling from ``PROBE_EVERY``."""
    return [min(PROBE_EVERY << i, PROBE_EVERY_MAX) for i in range(count)]


def test_probes_back_off_while_they_find_no_company():
    """A lone client's probes find nobody: each doubles the interval to the next, up to
    ``PROBE_EVERY_MAX``, so the delay is paid once in 64 requests once settled. The delay is
    0.2 s: a request older than the delay when the batcher looks at it runs at once, no probe
    (with 1 ms, a loaded machine let some probes' requests age past it before they were seen)."""
    runner = RecordingRunner()
    intervals = _probe_intervals(6)

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=8, max_queue_delay_s=0.2)
        await batcher.start()
        counts = []
        for interval in intervals:
            for _ in range(interval):
                await batcher.submit({"x": np.ones((1, 2), np.float32)}, 1)
            counts.append(batcher.probes)
        await batcher.stop()
        return counts

    assert intervals[-2:] == [PROBE_EVERY_MAX] * 2
    assert run(main()) == list(range(1, len(intervals) + 1))  # one probe at each interval's end
    assert runner.batches == [1] * sum(intervals)


def test_company_sets_probing_back_to_its_first_interval():
    """After a lone client has spread the probes out, clients arriving one at a time are
    still found (by the next probe) and probing starts again from ``PROBE_EVERY``."""
    runner = RecordingRunner()

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=8, max_queue_delay_s=0.2)
        await batcher.start()
        lone = sum(_probe_intervals(2))
        for _ in range(lone):  # two probes: the next one 32 batches away
            await batcher.submit({"x": np.ones((1, 2), np.float32)}, 1)
        spread = batcher._probe_every
        tasks = []
        for _ in range(2 * PROBE_EVERY_MAX):
            tasks.append(asyncio.ensure_future(batcher.submit({"x": np.ones((1, 2))}, 1)))
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
        result = spread, batcher._probe_every, batcher.expects_company, batcher.probes
        await batcher.stop()
        return result

    spread, after, expects, probes = run(main())
    assert spread == 4 * PROBE_EVERY and after == PROBE_EVERY
    assert expects and probes >= 3
    assert max(runner.batches) > 1


def test_concurrent_requests_still_wait_for_company_and_merge():
    """Once arrivals find others in flight, a batch short of the preferred size waits for
    more (here up to an hour): a lone request is held until company comes, then all
    run as one batch."""
    runner = RecordingRunner()

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=8, max_queue_delay_s=3600)
        await batcher.start()
        burst = [batcher.submit({"x": np.ones((1, 2))}, 1) for _ in range(8)]
        await asyncio.gather(*burst)
        expects = batcher.expects_company
        first = asyncio.ensure_future(batcher.submit({"x": np.zeros((1, 2))}, 1))
        await asyncio.sleep(0.05)
        held = not first.done()
        rest = [batcher.submit({"x": np.full((1, 2), float(i))}, 1) for i in range(7)]
        results = await asyncio.gather(first, *rest)
        await batcher.stop()
        return expects, held, results

    expects, held, results = run(main())
    assert expects and held
    assert runner.batches == [8, 8]
    np.testing.assert_array_equal(results[0]["y"], np.zeros((1, 2)))
    for i, result in enumerate(results[1:]):
        np.testing.assert_array_equal(result["y"], np.full((1, 2), 2 * i))


def test_the_wait_follows_the_arrivals_both_ways():
    """After a burst the batcher waits for company; a run of lone requests turns the wait
    off within a dozen; the next burst turns it on again."""
    runner = RecordingRunner()

    async def burst(batcher):
        await asyncio.gather(*(batcher.submit({"x": np.ones((1, 2))}, 1) for _ in range(8)))

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=8, max_queue_delay_s=0.001)
        await batcher.start()
        seen = []
        await burst(batcher)
        seen.append(batcher.expects_company)
        lone = 0
        while batcher.expects_company and lone < 50:
            await batcher.submit({"x": np.ones((1, 2))}, 1)
            lone += 1
        seen.append(batcher.expects_company)
        await burst(batcher)
        seen.append(batcher.expects_company)
        await batcher.stop()
        return seen, lone

    seen, lone = run(main())
    assert seen == [True, False, True] and lone <= 12, (seen, lone)


def test_a_slow_hand_off_does_not_keep_small_batches_off_the_loop():
    """What decides an inline run is the batch's own work, not the time the event loop took
    to come back from the thread: a first batch whose hand-off was held up by a busy loop
    still leaves the next lone requests running at once on the loop."""
    threads = []

    def runner(inputs):
        threads.append(threading.current_thread())
        return {"y": inputs["x"] * 2}

    async def hold_the_loop():
        time.sleep(0.05)  # the loop is busy while the first batch runs in its thread

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=8)
        await batcher.start()
        first = asyncio.ensure_future(batcher.submit({"x": np.ones((1, 2))}, 1))
        await asyncio.sleep(0)  # queued; its worker hands it to the thread...
        await asyncio.sleep(0)
        await hold_the_loop()  # ...and comes back only after this
        await first
        for _ in range(5):
            await asyncio.sleep(0.002)  # idle between requests
            await batcher.submit({"x": np.ones((1, 2))}, 1)
        await batcher.stop()

    run(main())
    loop_thread = threading.main_thread()
    assert threads[0] is not loop_thread  # the first batch (nothing known yet) went to a thread
    assert threads[1:] == [loop_thread] * 5, threads


def test_a_cancelled_request_leaves_the_queue_and_never_runs():
    """A caller that goes away (a reset stream, a deadline) takes its queued work with it:
    it no longer counts against the queue bound, and the model never runs it."""
    runner = RecordingRunner(delay_s=0.3)

    async def main():
        batcher = DynamicBatcher([runner], max_batch_size=1, max_queue_delay_s=0.0,
                                 max_queue_size=4)
        await batcher.start()
        busy = asyncio.ensure_future(batcher.submit({"x": np.ones((1, 2))}, 1))
        await asyncio.sleep(0.05)  # the worker now runs it
        waiting = [asyncio.ensure_future(batcher.submit({"x": np.full((1, 2), 7.0)}, 1))
                   for _ in range(4)]
        await asyncio.sleep(0.01)
        queued_before = batcher.queued
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        queued_after = batcher.queued
        await busy
        await batcher.stop()
        return queued_before, queued_after

    queued_before, queued_after = run(main())
    assert (queued_before, queued_after) == (4, 0)
    assert runner.batches == [1]  # only the one that was running
