"""MessageDeadlines on its own: a read that takes too long ends in TimeoutError, others
are left as they are."""

from __future__ import annotations

import asyncio

import pytest

from flowserve.server.grpc.app import MessageDeadlines


class Context:
    """A call whose message arrives after ``delay_s`` (never: None)."""

    def __init__(self, delay_s):
        self.delay_s = delay_s

    async def read(self):
        if self.delay_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.delay_s)
        return b"message"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_read_in_time_returns_the_message_and_an_overdue_one_times_out():
    async def main():
        deadlines = MessageDeadlines(0.2)
        fast = await deadlines.read(Context(0.0))
        with pytest.raises(TimeoutError):
            await deadlines.read(Context(None))
        again = await deadlines.read(Context(0.0))  # the task is usable after its timeout
        deadlines.stop()
        return fast, again

    assert run(main()) == (b"message", b"message")


def test_a_call_that_goes_away_is_cancelled_not_timed_out():
    async def main():
        deadlines = MessageDeadlines(60)
        reading = asyncio.ensure_future(deadlines.read(Context(None)))
        await asyncio.sleep(0.01)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        deadlines.stop()

    run(main())


def test_only_the_overdue_reads_are_cut_off():
    async def main():
        deadlines = MessageDeadlines(0.2)
        slow = asyncio.ensure_future(deadlines.read(Context(None)))
        await asyncio.sleep(0.1)
        late = asyncio.ensure_future(deadlines.read(Context(0.12)))  # done at 0.22 s: in time
        results = await asyncio.gather(slow, late, return_exceptions=True)
        deadlines.stop()
        return results

    slow, late = run(main())
    assert isinstance(slow, TimeoutError) and late == b"message"
