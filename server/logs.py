"""Structured (one JSON object per line) logs for the server.

Fields passed with ``extra=`` (``request_id``, ``model``, ``status`` …) become
keys of the line::

    configure_logging("info")
    log.info("infer failed", extra={"request_id": "r7", "status": 400})
    # {"time": "...", "level": "info", "logger": "flowserve.server", "message": "infer failed", ...}

Clients choose much of what is logged (model names, error text echoing their input), so a
line is at most ``LINE_BYTES`` long (its longest fields cut in the middle), and each message
is rate-limited (``RateLimit``: a burst, then a few lines a second; the next line that
passes says how many were dropped).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Callable, Optional, TextIO

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
LINE_BYTES = 512
_SCALARS = (int, float, bool, type(None))


class JsonFormatter(logging.Formatter):
    """Formats a record and its ``extra`` fields as one JSON line of at most ``limit``
    bytes (ASCII: anything else is escaped)."""

    def __init__(self, limit: int = LINE_BYTES):
        super().__init__()
        self.limit = limit

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return bounded_json(line, self.limit)


def bounded_json(line: dict, limit: int) -> str:
    """``line`` as JSON of at most ``limit`` bytes: the longest string fields are cut to one
    length (each keeps its start and end, ``...(N cut)...`` between) until it fits."""
    line = {k: v if isinstance(v, _SCALARS) else str(v) for k, v in line.items()}
    text = json.dumps(line)
    for _ in range(4):  # escapes and markers may take a second pass
        if len(text) <= limit:
            return text
        sizes = {k: len(json.dumps(v)) for k, v in line.items() if isinstance(v, str)}
        level = _water_level(list(sizes.values()), len(text) - limit)
        for key, size in sizes.items():
            if size > level:
                line[key] = _cut(line[key], level)
        text = json.dumps(line)
    if len(text) <= limit:
        return text
    return json.dumps({**{k: line[k] for k in ("time", "level", "logger")},
                       "message": "(a log line too long to shorten was dropped)"})


def _water_level(sizes: list, excess: int) -> int:
    """The length to cut every size above so that ``excess`` bytes go in all."""
    ordered = sorted(sizes, reverse=True)
    for count in range(1, len(ordered) + 1):
        below = ordered[count] if count < len(ordered) else 0
        if sum(ordered[:count]) - count * below >= excess:
            return max(0, (sum(ordered[:count]) - excess) // count - 2)
    return 0


def _cut(value: str, budget: int) -> str:
    """``value``'s start and end around ``...(N cut)...``, at most ``budget`` bytes as a JSON
    string (or the marker alone)."""
    def kept(count: int) -> str:
        tail = count // 3
        return f"{value[:count - tail]}...({len(value) - count} cut)...{value[len(value) - tail:]}"

    low, high = 0, min(len(value), budget)  # each character is a byte at least
    while low < high:
        middle = (low + high + 1) // 2
        if len(json.dumps(kept(middle))) <= budget:
            low = middle
        else:
            high = middle - 1
    return kept(low)


class RateLimit(logging.Filter):
    """Lets through a ``burst`` of lines of each message (logger, level and format string),
    then ``per_second`` of them; a line let through after some were dropped carries
    ``suppressed``: how many. Messages beyond the first ``MAX_KEYS`` share one allowance."""

    MAX_KEYS = 256

    def __init__(self, per_second: float = 10.0, burst: int = 50,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.per_second, self.burst, self._clock = per_second, burst, clock
        self._buckets: dict = {}  # key -> [tokens, last time, dropped]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg)[:120])
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) >= self.MAX_KEYS:
                    key = None
                bucket = self._buckets.setdefault(key, [float(self.burst), now, 0])
            tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.per_second)
            bucket[1] = now
            if tokens < 1:
                bucket[0], bucket[2] = tokens, bucket[2] + 1
                return False
            bucket[0] = tokens - 1
            if bucket[2]:
                record.suppressed, bucket[2] = bucket[2], 0
        return True


def configure_logging(level: str, stream: Optional[TextIO] = None) -> None:
    """Send flowserve's and uvicorn's logs to ``stream`` (stderr) as JSON lines at ``level``,
    bounded and rate-limited."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RateLimit())
    for name in ("flowserve", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
