"""Peak memory of a graph call: the process's resident-set high-water mark during it.

Linux keeps ``VmHWM`` (peak resident set) per process and lets a process reset it
(``/proc/self/clear_refs``); the peak of one call minus the resident set before it is
what the call needed on top of what was already there (parameters, inputs, Python).

>>> with PeakMemory() as peak:          # doctest: +SKIP
...     graph(x, y)
>>> peak.extra_mib                       # doctest: +SKIP
41.5
"""

from __future__ import annotations

_STATUS = "/proc/self/status"


def _status_kib(key: str) -> int | None:
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakMemory:
    """Context manager measuring the resident-set peak of its body (MiB); ``None`` where
    the system does not report it."""

    def __init__(self):
        self.baseline_mib = self.peak_mib = self.extra_mib = None

    def __enter__(self) -> "PeakMemory":
        self._ok = _reset_peak()
        rss = _status_kib("VmRSS")
        self.baseline_mib = rss / 1024 if rss is not None else None
        return self

    def __exit__(self, *exc) -> bool:
        peak = _status_kib("VmHWM")
        if self._ok and peak is not None and self.baseline_mib is not None:
            self.peak_mib = peak / 1024
            self.extra_mib = max(0.0, self.peak_mib - self.baseline_mib)
        return False

    def __str__(self) -> str:
        if self.extra_mib is None:
            return "peak memory: not reported by this system"
        return f"peak memory {self.peak_mib:.1f} MiB (+{self.extra_mib:.1f} MiB during the call)"
