"""The server's log lines: one JSON object each, at most 512 bytes whatever a client sends
(its model name, its error text), and a flood of one message rate-limited."""

from __future__ import annotations

import io
import json
import logging

import pytest

from flowserve.server.logs import LINE_BYTES, JsonFormatter, RateLimit, configure_logging


@pytest.fixture
def lines():
    """flowserve's logs configured as ``flowserve serve`` does, into a buffer; the lines
    written so far, parsed (the loggers are restored afterwards)."""
    names = ("flowserve", "uvicorn", "uvicorn.error")
    saved = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level,
                 logging.getLogger(n).propagate) for n in names}
    stream = io.StringIO()
    configure_logging("info", stream)

    def written() -> list[str]:
        return stream.getvalue().splitlines()

    yield written
    for name, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate


HOSTILE = ["m" * 1_000_000, "\x00\"\\" * 200_000, "é" * 300_000, "x" * 600]


@pytest.mark.parametrize("text", HOSTILE, ids=["1MB", "escapes", "non-ascii", "600B"])
def test_a_line_is_bounded_whatever_the_client_sent(lines, text):
    log = logging.getLogger("flowserve.server")
    log.info("infer failed", extra={"model": text, "error": f"model {text!r} unknown", "status": 404})
    try:
        raise ValueError(f"bad input {text}")
    except ValueError:
        log.exception("unexpected error on %s", "/v2/models/" + text)
    written = lines()
    assert len(written) == 2
    for line in written:
        assert len(line.encode()) <= LINE_BYTES, len(line.encode())
        record = json.loads(line)
        assert record["level"] in ("info", "error") and record["logger"] == "flowserve.server"
    first, second = map(json.loads, written)
    assert first["message"] == "infer failed" and first["status"] == 404
    assert second["message"].startswith("unexpected error on /v2/models/")
    assert "ValueError" in second["exception"] or "cut" in second["exception"]


def test_a_short_line_is_unchanged():
    record = logging.LogRecord("flowserve.server", logging.INFO, "f", 1, "serving %s", ("x",), None)
    record.http = "http://127.0.0.1:8000"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "serving x" and line["http"] == "http://127.0.0.1:8000"


def test_a_flood_of_one_message_is_rate_limited(lines):
    log = logging.getLogger("flowserve.server")
    for i in range(5000):
        log.info("infer failed", extra={"request_id": f"r{i}"})
    log.warning("another message")
    written = [json.loads(line) for line in lines()]
    floods = [w for w in written if w["message"] == "infer failed"]
    assert 1 <= len(floods) <= 100
    assert written[-1]["message"] == "another message"  # not starved by the flood


def test_the_next_line_after_a_flood_says_how_many_were_dropped():
    now = [0.0]
    limit = RateLimit(per_second=2, burst=3, clock=lambda: now[0])

    def passes() -> list:
        record = logging.LogRecord("flowserve", logging.INFO, "f", 1, "same", (), None)
        return [limit.filter(record), getattr(record, "suppressed", 0)]

    assert [passes() for _ in range(5)] == [[True, 0]] * 3 + [[False, 0]] * 2
    now[0] = 0.5  # one line's allowance back
    assert passes() == [True, 2]
    assert passes() == [False, 0]
