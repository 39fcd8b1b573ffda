"""Resuming a data-parallel graph from rank 0's checkpoint continues the run exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tests.distributed.helpers import check, launch


@pytest.mark.slow
def test_resume_from_rank_0_checkpoint_matches_the_uninterrupted_run(tmp_path):
    check(launch("resume.py", "full", tmp_path))
    check(launch("resume.py", "resume", tmp_path))
    for rank in range(2):
        full = np.load(tmp_path / f"full-rank{rank}.npz")
        resumed = np.load(tmp_path / f"resume-rank{rank}.npz")
        assert sorted(full.keys()) == sorted(resumed.keys())
        assert any(key.endswith("-m") for key in full.keys())  # AdamW's state is part of it
        for key in full.keys():
            np.testing.assert_array_equal(resumed[key], full[key], err_msg=f"{key} on rank {rank}")
