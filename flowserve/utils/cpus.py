"""How many CPUs this process may use: what ONNX Runtime's thread counts and the server's
session layout are sized by.

``os.cpu_count()`` counts the machine's CPUs. A process pinned to some of them
(``taskset``, a cpuset) or given a CPU quota by its container (``docker run --cpus 2``,
a Kubernetes CPU limit) has fewer; threads sized by the machine's count then take turns on
the cores the quota allows and every run waits for its slowest thread. So the count is
the affinity mask's, capped by the cgroup quota (v2 ``cpu.max``, v1
``cpu.cfs_quota_us``/``cpu.cfs_period_us``) rounded down, at least 1, as Go's automaxprocs
counts. ``FLOWSERVE_CPUS`` overrides it::

    >>> usable_cpus() >= 1
    True
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

CPUS_ENV = "FLOWSERVE_CPUS"


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup"),
                own_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The CPUs this process may use: ``FLOWSERVE_CPUS`` if set, else its affinity mask
    capped by its cgroup's CPU quota."""
    override = os.environ.get(CPUS_ENV, "").strip()
    if override:
        if not override.isdigit() or int(override) < 1:
            raise ValueError(f"{CPUS_ENV} must be a whole number of CPUs, 1 or more; got {override!r}")
        return int(override)
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota(cgroup_root, own_cgroup)
    if quota is not None:
        count = min(count, max(1, math.floor(quota)))
    return max(1, count)


def cgroup_cpu_quota(cgroup_root: Path, own_cgroup: Path) -> Optional[float]:
    """CPUs' worth of time per period the process's cgroups allow (``1.5`` for
    ``--cpus 1.5``), the tightest along their paths; None without a quota or cgroups."""
    try:
        lines = own_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    v2_path = v1_path = "/"
    for line in lines:  # "0::/path" (v2), "4:cpu,cpuacct:/path" (v1)
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            v2_path = path or "/"
        elif "cpu" in controllers.split(","):
            v1_path = path or "/"
    quotas = [_v2_quota(d) for d in _down_to(cgroup_root, v2_path)]
    for mount in (cgroup_root / "cpu", cgroup_root / "cpu,cpuacct"):
        quotas += [_v1_quota(d) for d in _down_to(mount, v1_path)]
    return min((q for q in quotas if q is not None), default=None)


def _down_to(mount: Path, path: str) -> list[Path]:
    """``mount`` and each folder from it down to ``path`` (a container sees its own
    cgroup as the root; a process on a host sees its path in /proc/self/cgroup)."""
    dirs = [mount]
    for part in Path(path).parts[1:]:
        dirs.append(dirs[-1] / part)
    return dirs


def _v2_quota(directory: Path) -> Optional[float]:
    try:
        quota, _, period = (directory / "cpu.max").read_text().partition(" ")
    except OSError:
        return None
    if quota.strip() == "max":
        return None
    try:
        return int(quota) / int(period)
    except ValueError:
        return None


def _v1_quota(directory: Path) -> Optional[float]:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None
