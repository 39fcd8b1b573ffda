"""MessageReads on its own: a read that takes too long ends in MessageTimeout, others are
left as they are; reads beyond the room wait for it, and while they wait a read that held
room too long is cut off (MessageStalled)."""

from __future__ import annotations

import asyncio

import pytest

from flowserve.server.grpc.receive import PROBE_AFTER_S, MessageReads, MessageStalled, MessageTimeout


class Context:
    """A call on connection ``peer`` whose message arrives after ``delay_s`` (never: None)."""

    def __init__(self, delay_s, peer: str = "ipv4:127.0.0.1:1"):
        self.delay_s, self.where = delay_s, peer

    def peer(self) -> str:
        return self.where

    async def read(self):
        if self.delay_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.delay_s)
        return b"message"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_read_in_time_returns_the_message_and_an_overdue_one_times_out():
    async def main():
        reads = MessageReads(0.2, slots=4, stall_s=60)
        fast = await reads.read(Context(0.0))
        with pytest.raises(MessageTimeout):
            await reads.read(Context(None))
        again = await reads.read(Context(0.0))  # the task is usable after its timeout
        reads.stop()
        return fast, again

    assert run(main()) == (b"message", b"message")


def test_a_call_that_goes_away_is_cancelled_not_timed_out():
    async def main():
        reads = MessageReads(60, slots=1, stall_s=60)
        reading = asyncio.ensure_future(reads.read(Context(None)))
        waiting = asyncio.ensure_future(reads.read(Context(None)))  # no room: waits
        await asyncio.sleep(0.01)
        for call in (reading, waiting):
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        done = await reads.read(Context(0.0))  # the room is free again
        reads.stop()
        return done

    assert run(main()) == b"message"


def test_only_the_overdue_reads_are_cut_off():
    async def main():
        reads = MessageReads(0.2, slots=4, stall_s=60)
        slow = asyncio.ensure_future(reads.read(Context(None)))
        await asyncio.sleep(0.1)
        late = asyncio.ensure_future(reads.read(Context(0.12)))  # done at 0.22 s: in time
        results = await asyncio.gather(slow, late, return_exceptions=True)
        reads.stop()
        return results

    slow, late = run(main())
    assert isinstance(slow, MessageTimeout) and late == b"message"


def test_a_whole_message_is_read_in_the_spare_room_and_one_still_arriving_is_cut_off():
    """The only room is held by a message that never comes (longer than PROBE_AFTER_S): a
    call whose message is whole is read at once in the spare room; one whose message is
    still arriving is cut off there (MessageStalled) after the spare room's lease; the
    stalled holder is left be."""
    async def main():
        reads = MessageReads(60, slots=1, stall_s=60, probe_s=0.05)
        stalled = asyncio.ensure_future(reads.read(Context(None)))
        await asyncio.sleep(PROBE_AFTER_S + 0.05)
        whole = await reads.read(Context(0.0, "ipv4:10.0.0.2:1"))
        started = asyncio.get_running_loop().time()
        with pytest.raises(MessageStalled):
            await reads.read(Context(None, "ipv4:10.0.0.3:1"))
        took = asyncio.get_running_loop().time() - started
        assert not stalled.done()
        stalled.cancel()
        await asyncio.gather(stalled, return_exceptions=True)
        reads.stop()
        return whole, took

    whole, took = run(main())
    assert whole == b"message" and 0.04 < took < 5  # 0.05 s, with room for a loaded machine


def test_stalled_reads_keep_their_room_until_others_wait_then_are_cut_off():
    """A room held by a message that never comes: nothing happens while nobody waits (past
    the stall time); then a call waits, the stalled read is cut off (MessageStalled) and the
    waiting call is read in its place (before any spare room is lent)."""
    async def main():
        reads = MessageReads(60, slots=1, stall_s=0.05, probe_s=60)
        holder = asyncio.ensure_future(reads.read(Context(None, "ipv4:10.0.0.1:1")))
        await asyncio.sleep(0.2)
        assert not holder.done()
        waiting = await reads.read(Context(0.0, "ipv4:10.0.0.2:1"))
        cut = holder.done() and isinstance(holder.exception(), MessageStalled)
        reads.stop()
        return waiting, cut

    assert run(main()) == (b"message", True)


def test_freed_room_goes_to_the_connection_holding_least_then_to_the_latest_come():
    """Connection 1 holds both rooms (one for good), connection 3 waits with a call that
    takes the next room for good, and connection 1 waits with two more calls; connection 2's
    call, come between them, is read first when a room frees (it and connection 3 hold
    none, and it came later); then, in the spare room, connection 1's later call, then its
    earlier one."""
    async def main():
        reads, order = MessageReads(60, slots=2, stall_s=60, probe_s=60), []
        release, keep = asyncio.Event(), asyncio.Event()

        class Held(Context):
            def __init__(self, event, peer="ipv4:10.0.0.1:1"):
                super().__init__(None, peer)
                self.event = event

            async def read(self):
                await self.event.wait()
                return b"held"

        async def call(name: str, peer: str):
            order.append(await reads.read(Context(0.0, peer)) and name)

        holders = []
        for held in (Held(keep), Held(release), Held(keep, "ipv4:10.0.0.3:1")):
            holders.append(asyncio.ensure_future(reads.read(held)))
            await asyncio.sleep(0)
        calls = []
        for name, peer in (("a1", "ipv4:10.0.0.1:1"), ("b", "ipv4:10.0.0.2:1"),
                           ("a2", "ipv4:10.0.0.1:1")):
            calls.append(asyncio.ensure_future(call(name, peer)))
            await asyncio.sleep(0)
        release.set()
        await asyncio.gather(*calls)
        keep.set()
        await asyncio.gather(*holders)
        reads.stop()
        return order

    assert run(main()) == ["b", "a2", "a1"]
