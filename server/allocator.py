"""The C allocator's settings for a serving process (glibc's ``mallopt``).

A request or answer body larger than 128 KiB (an image, a batch of rows) is a fresh
allocation, and so are the copies of it that the protocol layers make. glibc serves such
sizes with ``mmap`` and unmaps them when they are freed, or trims the top of its heap once
more than a few times their size is free there, so the next request's buffers are new pages
again: each 4 KiB page costs a fault and zeroing when first touched. One 588 KiB input over
gRPC made about 380 page faults a request, a quarter of the server's time. With the
thresholds raised, freed buffers stay in the process and the next request reuses them.

The price is memory: after a burst of large requests, up to ``TRIM_THRESHOLD`` bytes of
freed memory at the top of the heap stay in the process instead of going back to the
system (``bench/bench_hostile.py``: 7 MB more after its 60 MB JSON body with 32 MiB, 47 MB
more with 128 MiB, which saved no more page faults). ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the environment (glibc's
own variables) are left to rule, as they are elsewhere::

    keep_freed_memory()   # in the serving process, before it serves
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 << 20  # allocations below this come from the heap (glibc's largest value)
TRIM_THRESHOLD = 32 << 20  # free memory at the heap's top kept for reuse
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False (nothing changed) on
    other C libraries and systems, or where the environment sets them."""
    if not sys.platform.startswith("linux") or any(name in os.environ for name in ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
