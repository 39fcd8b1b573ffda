"""The serving process's allocator settings (``server/allocator.py``): with them, the
buffers of a request with a 588 KiB tensor (a body, its copies) are reused by the next
request instead of being fresh pages, each a page fault; glibc's own environment variables
are left to rule where they are set. Counted in a fresh interpreter with ``getrusage``."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

SCRIPT = """
import resource, sys
from flowserve.server.allocator import keep_freed_memory
print(keep_freed_memory())
data = b"x" * 602112  # a 3x224x224 FP32 image
def request():  # a body, copies of it, freed at the end as a request's buffers are
    body = bytearray(data); message = bytes(body); framed = message + b"y"
    return len(bytes(memoryview(framed)[1:]))
for _ in range(20):
    request()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    request()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 200)
"""


def run(**env) -> tuple[str, float]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env={**environment, **env}, timeout=120, check=True)
    changed, faults = done.stdout.split()
    return changed, float(faults)


def test_freed_request_buffers_are_reused_without_page_faults():
    changed, faults = run()
    assert changed == "True"
    assert faults < 10  # each buffer is ~147 pages: fresh pages would fault hundreds of times


def test_glibcs_environment_variables_are_left_to_rule():
    changed, _ = run(MALLOC_MMAP_THRESHOLD_="131072")
    assert changed == "False"
