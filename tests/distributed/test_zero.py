"""ZeRO stages 1 and 2 train as plain data parallelism and hold 1/N of the optimizer state."""

from __future__ import annotations

import json

import numpy as np
from safetensors import safe_open

from tests.distributed.helpers import check, launch
from tests.distributed.training import make_model, parameters, train_graph, with_grad_scaler


def test_zero_stages_equal_data_parallelism_with_a_shard_of_the_state(tmp_path):
    result = launch("zero.py", tmp_path)
    check(result)
    print(result.stdout)
    for rank in range(2):
        plain = np.load(tmp_path / f"dp-rank{rank}.npz")
        for variant in ("zero1", "zero2"):
            sharded = np.load(tmp_path / f"{variant}-rank{rank}.npz")
            assert sorted(sharded.keys()) == sorted(plain.keys())
            assert any(k.endswith("-v") for k in plain.keys())
            for key in plain.keys():
                np.testing.assert_allclose(sharded[key], plain[key], rtol=1e-6, atol=1e-6 * np.abs(plain[key]).max(),
                                           err_msg=f"{variant} {key} on rank {rank}")
            held = json.loads((tmp_path / f"{variant}-rank{rank}.json").read_text())
            assert held["full"] / 2 <= held["mine"] <= held["full"] / 2 + 64, held
    assert "ZeRO stage 2: AdamW state" in result.stdout
    for rank in range(2):  # build() reading opt.state[p]: the shards hold it, a clear error
        assert f"rank {rank} refused: nn.Graph" in result.stdout and "graph.state_dict()" in result.stdout
    model = make_model("mlp")  # one process, the same scaler: the same step skipped
    graphs = train_graph(model, "mlp", configure=with_grad_scaler(), overflow=True)
    # the scale doubles every 2 good steps: 4096 after 5 steps, 2048 when step 3 overflowed
    assert float(graphs[0].parts.grad_scaler.get_scale()) == 2048.0
    ref = parameters(model)
    for rank in range(2):
        got = np.load(tmp_path / f"zero2_scaler-params-rank{rank}.npz")
        for key, expected in ref.items():
            np.testing.assert_allclose(got[key], expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max(), err_msg=key)
    saved = safe_open(str(tmp_path / "zero2-saved" / "params.safetensors"), "np")
    assert "model.0.weight" in saved.keys() and not any("ZeRO" in k for k in saved.keys())
