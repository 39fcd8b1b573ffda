"""How unary gRPC calls receive their request messages: each within
``--grpc-message-timeout``, and only as many at once as ``--grpc-receive-buffer-bytes``
holds.

grpc-core takes a call's message as fast as the client sends it once the call asks for it
(the stream's flow-control window opens to the length the message announces, up to
``--max-request-bytes``), and only ``--grpc-receive-window-bytes`` before. So each
read of a message holds *room*, counted as ``--max-request-bytes`` (the most it can pin),
and the room of all connections together is ``--grpc-receive-buffer-bytes`` (two 64 MiB
messages by default; one at least). A call that finds no room waits for it, holding at
most that window; once a room has been held ``PROBE_AFTER_S``, the latest come of the
waiting calls may try its read in one spare room for ``PROBE_S``: a message already whole (one that fits in the window) is read at once,
one still arriving by then is cut off (``RESOURCE_EXHAUSTED``). While calls wait, a read
that has held its room for ``--grpc-receive-stall-timeout`` without its message being
whole is cut off as well: messages stalled half-way cannot keep the room from others.
Freed room goes to the waiting call whose connection holds the least of it, the latest
come among equals (a batch of stalled calls, all come together, waits behind a new call)::

    reads = MessageReads(timeout_s=60, slots=2, stall_s=1)
    raw = await reads.read(context)   # or MessageTimeout / MessageStalled
    reads.stop()
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

TIMEOUT, STALLED = "timeout", "stalled"  # why a read was cut off
PROBE_S = 0.03  # how long the spare room is lent: a whole message is read within it (50 ms let stalled ones pin 250 MB)
PROBE_AFTER_S = 0.25  # how long a room must have been held before the spare one is lent


class MessageTimeout(Exception):
    """The message was not whole within ``--grpc-message-timeout``."""


class MessageStalled(Exception):
    """The message held its room for ``--grpc-receive-stall-timeout`` while others waited."""


class MessageReads:
    """The reads of unary calls' request messages, with their deadlines and their room.

    One sweep every quarter of ``timeout_s`` (at most every second) cancels the overdue
    reads: a timer per call (``asyncio.timeout``) would cost the event loop ~20-50 µs of
    every request; a read is cut off between ``timeout_s`` and a quarter more after it
    began (its wait for room included). A read with room free costs two dict entries."""

    def __init__(self, timeout_s: float, slots: int, stall_s: float, probe_s: float = PROBE_S):
        self.timeout_s, self.slots, self.stall_s = timeout_s, max(1, slots), stall_s
        self.probe_s = probe_s
        self._deadlines: dict[asyncio.Task, float] = {}  # reading task -> its deadline
        self._cut: dict[asyncio.Task, str] = {}  # tasks cancelled here -> TIMEOUT / STALLED
        self._holders: dict[asyncio.Task, list] = {}  # -> [since, context, peer or None]
        self._probe: Optional[tuple[asyncio.Task, asyncio.TimerHandle]] = None  # the spare room
        self._timer: Optional[asyncio.TimerHandle] = None  # the next _review, while calls wait
        self._waiters: dict[asyncio.Task, tuple[asyncio.Future, Any, str]] = {}  # in order come
        self._sweeper: Optional[asyncio.Task] = None

    async def read(self, context):
        """``context.read()`` once there is room; ``MessageTimeout`` or ``MessageStalled``
        when it is cut off."""
        task, loop = asyncio.current_task(), asyncio.get_running_loop()
        if self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep())
        self._deadlines[task] = loop.time() + self.timeout_s
        try:
            await self._room(task, context, loop)
            try:
                return await context.read()
            finally:
                self._give(task, loop)
        except asyncio.CancelledError:
            why = self._cut.get(task)
            if why is None:
                raise  # the call went away: not ours
            task.uncancel()
            raise (MessageTimeout if why == TIMEOUT else MessageStalled) from None
        finally:
            self._deadlines.pop(task, None)
            self._cut.pop(task, None)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    # -- room ---------------------------------------------------------------------------------

    async def _room(self, task: asyncio.Task, context, loop) -> None:
        """Return once ``task`` holds room: at once when some is free and nobody waits."""
        if self._rooms_held() < self.slots and not self._waiters:
            self._holders[task] = [loop.time(), context, None]
            return
        granted = loop.create_future()
        self._waiters[task] = (granted, context, context.peer())
        self._give(None, loop)  # hands out free room, else reviews the rooms (_review)
        try:
            await granted
        except BaseException:
            self._waiters.pop(task, None)
            if granted.done():  # room was handed over as the wait ended: pass it on
                self._give(task, loop)
            raise

    def _review(self, loop) -> None:
        """While calls wait: cut off the stalled reads and lend the spare room when either is
        due, and look again when the next is (one timer for all the waiting calls: the oldest
        room only grows older, so a timer already set is never late)."""
        if not self._waiters:
            return
        now = loop.time()
        due = self._next_change(now)
        if due is not None and due <= 0:
            self._cut_stalled(now)
            self._offer_spare(loop)
            due = self._next_change(now)
        if self._timer is None and due is not None and self._waiters:  # 10 ms at least: reads
            self._timer = loop.call_later(max(due, 0.01), self._fire, loop)  # cut off unwind meanwhile

    def _fire(self, loop) -> None:
        self._timer = None
        self._review(loop)

    def _rooms_held(self) -> int:
        return len(self._holders) - (self._probe is not None)

    def _give(self, task: Optional[asyncio.Task], loop) -> None:
        """``task``'s room (if it holds some) to the waiting calls, best first; the spare
        room, when free, to the best of those left."""
        self._holders.pop(task, None)
        if self._probe is not None and self._probe[0] is task:
            self._probe[1].cancel()
            self._probe = None
        while self._waiters and self._rooms_held() < self.slots:
            self._grant(self._best_waiter(), loop)
        if self._waiters:
            self._review(loop)

    def _offer_spare(self, loop) -> None:
        """The spare room to the best waiting call, once a room has been held
        ``PROBE_AFTER_S`` (rooms that turn over in milliseconds need no spare)."""
        if not self._waiters or self._probe is not None:
            return  # the common case, every read: checked before anything is counted
        rooms = self._rooms()
        if rooms and rooms[0][1] + PROBE_AFTER_S <= loop.time():
            chosen = self._best_waiter()
            self._probe = (chosen, loop.call_later(self.probe_s, self._cut_off, chosen))
            self._grant(chosen, loop)

    def _grant(self, chosen: asyncio.Task, loop) -> None:
        granted, context, peer = self._waiters.pop(chosen)
        self._holders[chosen] = [loop.time(), context, peer]
        granted.set_result(None)

    def _cut_off(self, task: asyncio.Task) -> None:
        if task in self._holders and task not in self._cut:
            self._cut[task] = STALLED
            task.cancel()

    def _best_waiter(self) -> asyncio.Task:
        """The waiting call whose connection holds the least room; the latest come of those."""
        held: dict[str, int] = {}
        for holder in self._holders.values():
            if holder[2] is None:
                holder[2] = holder[1].peer()
            held[holder[2]] = held.get(holder[2], 0) + 1
        best, best_held = None, None
        for task, (_, _, peer) in self._waiters.items():  # in the order they came
            if best_held is None or held.get(peer, 0) <= best_held:
                best, best_held = task, held.get(peer, 0)
        return best

    def _rooms(self) -> list[tuple[asyncio.Task, float]]:
        """(task, since) of the reads holding rooms (the spare one aside), oldest first."""
        probe = None if self._probe is None else self._probe[0]
        return sorted(((task, holder[0]) for task, holder in self._holders.items()
                       if task is not probe), key=lambda item: item[1])

    def _cut_stalled(self, now: float) -> None:
        """Cut off the reads that held rooms ``stall_s`` or more, oldest first, one for each
        waiting call that the reads already cut off do not make room for."""
        rooms = self._rooms()
        wanted = len(self._waiters) - sum(1 for task, _ in rooms if task in self._cut)
        for task, since in rooms:
            if wanted <= 0 or since + self.stall_s > now:
                return
            if task not in self._cut:
                self._cut_off(task)
                wanted -= 1

    def _next_change(self, now: float) -> Optional[float]:
        """Seconds until the oldest read holding a room, not yet cut off, has held it
        ``stall_s``, or (the spare room free) ``PROBE_AFTER_S``; None: none will."""
        probe = None if self._probe is None else self._probe[0]
        since = [holder[0] for task, holder in self._holders.items()
                 if task is not probe and task not in self._cut]
        if not since:
            return None
        after = self.stall_s if probe is not None else min(self.stall_s, PROBE_AFTER_S)
        return max(0.0, min(since) + after - now)

    # -- deadlines ----------------------------------------------------------------------------

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, self.timeout_s / 4))
            now = loop.time()
            for task, deadline in list(self._deadlines.items()):
                if deadline <= now and task not in self._cut:
                    self._cut[task] = TIMEOUT
                    task.cancel()
