"""Two pipeline stages on two processes, four micro-batches per step, equal one process
accumulating the gradients of the four micro-batches."""

from __future__ import annotations

import numpy as np

from tests.distributed.helpers import check, launch
from tests.distributed.training import TwoStages, parameters, train_pipeline_reference


def test_two_stage_pipeline_equals_gradient_accumulation(tmp_path):
    check(launch("pipeline.py", tmp_path))
    model = TwoStages()
    train_pipeline_reference(model)
    ref = parameters(model)
    for rank in range(2):
        got = np.load(tmp_path / f"pipeline-rank{rank}.npz")
        for name, expected in ref.items():
            err = float(np.abs(got[name] - expected).max()) / float(np.abs(expected).max())
            assert err <= 1e-5, f"rank {rank}: {name} differs by {err:.2e}"
    losses = [np.load(tmp_path / f"losses-rank{rank}.npy") for rank in range(2)]
    np.testing.assert_array_equal(losses[0], losses[1])  # every rank returns the last stage's loss
    assert losses[0].shape == (6, 4)
    states = [np.load(tmp_path / f"optimizer-rank{rank}.npz") for rank in range(2)]
    assert {"model.front.0.weight-m", "model.back.2.weight-v"} <= set(states[0].keys())
    for key in states[0].keys():  # every rank's graph.state_dict() holds every stage's state
        np.testing.assert_array_equal(states[0][key], states[1][key], err_msg=key)
