"""A process that keeps part of one core busy, for measuring how a run shares its cores.

``with busy(0.15): ...`` runs the body while another process spins for 15% of every
2 ms and sleeps the rest, about what a serving process's event loop and a load
generator on the same machine take from ONNX Runtime's threads.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time


def _spin(duty: float, period_s: float, stop) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        while time.perf_counter() - started < duty * period_s:
            pass
        time.sleep((1 - duty) * period_s)


@contextlib.contextmanager
def busy(duty: float, period_s: float = 0.002):
    """Run the ``with`` body beside a process busy ``duty`` of each ``period_s``."""
    stop = multiprocessing.Event()
    process = multiprocessing.Process(target=_spin, args=(duty, period_s, stop), daemon=True)
    process.start()
    try:
        yield
    finally:
        stop.set()
        process.join()
