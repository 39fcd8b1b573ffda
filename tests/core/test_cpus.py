"""The CPU count threads are sized by: the affinity mask, capped by a container's cgroup
quota (v2 and v1, along the process's cgroup path), or ``FLOWSERVE_CPUS``."""

from __future__ import annotations

import os

import pytest

from flowserve.onnx_backend.runtime import session_options
from flowserve.utils import cpus
from flowserve.utils.cpus import usable_cpus


@pytest.fixture
def eight_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.delenv(cpus.CPUS_ENV, raising=False)


def _tree(root, files: dict, own: str):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "self-cgroup").write_text(own)
    return dict(cgroup_root=root / "fs", own_cgroup=root / "self-cgroup")


@pytest.mark.parametrize("cpu_max, expected", [("max 100000\n", 8), ("150000 100000\n", 1),
                                               ("400000 100000\n", 4), ("50000 100000\n", 1),
                                               ("2000000 100000\n", 8)])
def test_a_v2_quota_caps_the_affinity_rounded_down(tmp_path, eight_cpus, cpu_max, expected):
    paths = _tree(tmp_path, {"fs/cpu.max": cpu_max}, "0::/\n")
    assert usable_cpus(**paths) == expected


def test_the_tightest_quota_along_the_own_cgroup_path_counts(tmp_path, eight_cpus):
    paths = _tree(tmp_path, {"fs/cpu.max": "max 100000", "fs/kubepods/cpu.max": "600000 100000",
                             "fs/kubepods/pod1/cpu.max": "300000 100000",
                             "fs/other/cpu.max": "100000 100000"}, "0::/kubepods/pod1\n")
    assert usable_cpus(**paths) == 3


def test_a_v1_quota_counts_and_minus_one_means_none(tmp_path, eight_cpus):
    own = "4:memory:/x\n3:cpu,cpuacct:/job\n"
    paths = _tree(tmp_path, {"fs/cpu,cpuacct/job/cpu.cfs_quota_us": "250000",
                             "fs/cpu,cpuacct/job/cpu.cfs_period_us": "100000"}, own)
    assert usable_cpus(**paths) == 2
    paths = _tree(tmp_path, {"fs/cpu,cpuacct/job/cpu.cfs_quota_us": "-1"}, own)
    assert usable_cpus(**paths) == 8


def test_without_cgroups_the_affinity_counts(tmp_path, eight_cpus):
    assert usable_cpus(cgroup_root=tmp_path / "none", own_cgroup=tmp_path / "none") == 8


def test_damaged_cgroup_files_are_ignored(tmp_path, eight_cpus):
    paths = _tree(tmp_path, {"fs/cpu.max": "lots 100000", "fs/cpu/cpu.cfs_quota_us": "x"}, "garbage")
    assert usable_cpus(**paths) == 8


def test_the_environment_overrides_and_is_checked(monkeypatch, tmp_path, eight_cpus):
    monkeypatch.setenv(cpus.CPUS_ENV, "3")
    assert usable_cpus(cgroup_root=tmp_path, own_cgroup=tmp_path) == 3
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv(cpus.CPUS_ENV, bad)
        with pytest.raises(ValueError, match="FLOWSERVE_CPUS must be a whole number"):
            usable_cpus(cgroup_root=tmp_path, own_cgroup=tmp_path)


def test_this_process_gets_at_least_one_and_no_more_than_its_affinity(monkeypatch):
    monkeypatch.delenv(cpus.CPUS_ENV, raising=False)
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))


def test_onnx_runtime_sessions_are_sized_by_the_usable_cpus(monkeypatch):
    monkeypatch.setenv(cpus.CPUS_ENV, "6")
    assert session_options().intra_op_num_threads == 6
    assert session_options(instances=4).intra_op_num_threads == 1
    assert session_options(instances=2, threads=5).intra_op_num_threads == 5
