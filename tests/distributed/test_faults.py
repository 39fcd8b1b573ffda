"""What a failed run looks like: every rank ends, non-zero, within the collective timeout,
with a message naming the rank; a rendezvous that cannot happen is a one-line error."""

from __future__ import annotations

import time

from tests.distributed.helpers import free_port, launch

TIMEOUT_S = 4.0


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("flowserve")]


def test_a_killed_rank_stops_the_others_and_is_named():
    start = time.monotonic()
    result = launch("faults.py", "kill", timeout_s=TIMEOUT_S, wall_s=60)
    assert result.returncode != 0
    assert "rank 1 (local rank 1" in result.stderr and "was killed by SIGKILL" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert time.monotonic() - start < 30


def test_an_exception_on_one_rank_stops_the_others_at_once():
    start = time.monotonic()
    result = launch("faults.py", "raise", timeout_s=120, wall_s=110)
    assert result.returncode == 1
    assert "ValueError: a bug in the training script" in result.stderr, result.stderr
    assert "rank 1 (local rank 1" in result.stderr and "exited with code 1" in result.stderr, result.stderr
    assert time.monotonic() - start < 60  # not the 120 s collective timeout


def test_a_hanging_rank_fails_the_collective_after_the_timeout():
    result = launch("faults.py", "hang", timeout_s=TIMEOUT_S, wall_s=60)
    assert result.returncode != 0
    lines = _error_lines(result.stderr)
    assert any(line.startswith("flowserve: rank 0: allreduce on rank 0: no answer from the other ranks within the "
                               f"{TIMEOUT_S:g} s") for line in lines), result.stderr
    assert any("rank 0 (local rank 0" in line and "exited with code 1" in line for line in lines), result.stderr


def test_a_missing_rank_is_a_one_line_error():
    """Two nodes announced, one started: rank 0 waits the timeout, then says why."""
    result = launch("faults.py", "join", nproc=1, timeout_s=2, wall_s=60, launcher_args=["--nnodes", "2"])
    assert result.returncode == 1
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("flowserve: rank 0")]
    assert "waited 2 s at 127.0.0.1:" in line and "for 2 ranks" in line and "WORLD_SIZE=2" in line, line
    assert "Traceback" not in result.stderr


def test_an_unreachable_master_is_a_one_line_error():
    port = free_port()  # nobody listens there
    result = launch("faults.py", "join", nproc=1, timeout_s=2, wall_s=60,
                    launcher_args=["--nnodes", "2", "--node_rank", "1", "--master_port", str(port)])
    assert result.returncode == 1
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("flowserve: rank 1")]
    assert f"could not join the 2 ranks at master 127.0.0.1:{port} within 2 s" in line, line
    assert "Traceback" not in result.stderr
