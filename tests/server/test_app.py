"""The server's transport wrapper: writes of one loop step leave together."""

from __future__ import annotations

import asyncio

from flowserve.server.app import CoalescingTransport


class RecordingTransport:
    def __init__(self):
        self.sent, self.closed = [], False

    def writelines(self, parts):
        self.sent.append(b"".join(parts))

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def get_write_buffer_size(self):
        return 0

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 1)}.get(name, default)


def test_writes_of_one_step_are_sent_once_at_its_end():
    async def main():
        inner = RecordingTransport()
        transport = CoalescingTransport(inner, asyncio.get_running_loop())
        transport.write(b"head ")
        transport.write(b"body")
        assert inner.sent == [] and transport.get_write_buffer_size() == 9
        await asyncio.sleep(0)
        transport.write(b"next")
        await asyncio.sleep(0)
        assert transport.get_extra_info("peername") == ("127.0.0.1", 1)
        return inner.sent

    assert asyncio.run(main()) == [b"head body", b"next"]


def test_close_sends_what_is_pending_first_and_later_writes_are_dropped():
    async def main():
        inner = RecordingTransport()
        transport = CoalescingTransport(inner, asyncio.get_running_loop())
        transport.write(b"last words")
        transport.close()
        transport.write(b"too late")
        await asyncio.sleep(0)
        return inner

    inner = asyncio.run(main())
    assert inner.sent == [b"last words"] and inner.closed
