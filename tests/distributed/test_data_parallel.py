"""DistributedDataParallel (eager) and nn.Graph data parallelism over launched processes
equal one process training on the concatenated batch; rank 0 saves the deployable
directory a single process saves."""

from __future__ import annotations

import json

import numpy as np
import pytest

import flowserve as flow
from tests.distributed.helpers import check, launch
from tests.distributed.training import TrainGraph, batch, make_model, parameters, train_eager


def reference(kind: str) -> dict:
    """One process, the whole batch, BatchNorm in place of SyncBatchNorm."""
    model = make_model(kind, sync=False)
    train_eager(model, kind)
    return parameters(model)


def assert_close(got, ref: dict, rtol: float, where: str) -> None:
    assert set(got.keys()) == set(ref), where
    for name, expected in ref.items():
        scale = max(float(np.abs(expected).max()), 1e-12)
        err = float(np.abs(got[name] - expected).max()) / scale
        assert err <= rtol, f"{where}: {name} differs by {err:.2e} (relative to its largest entry)"


def run_and_compare(tmp_path, nproc: int, kinds: list[str]) -> None:
    check(launch("data_parallel.py", tmp_path, ",".join(kinds), nproc=nproc))
    for kind in kinds:
        ref = reference(kind)
        for mode in ("ddp", "graph") + (("no_sync",) if kind == "mlp" else ()):
            for rank in range(nproc):
                got = np.load(tmp_path / f"{mode}-{kind}-rank{rank}.npz")
                assert_close(got, ref, 1e-5, f"{mode} {kind} rank {rank} of {nproc}")


def test_two_processes_equal_one_process_on_the_whole_batch(tmp_path):
    run_and_compare(tmp_path, 2, ["mlp", "conv"])
    local = [np.load(tmp_path / f"no_sync-local-grad-rank{r}.npy") for r in range(2)]
    assert np.abs(local[0] - local[1]).max() > 1e-3, "inside no_sync() the gradients must stay each rank's own"
    saved = json.loads((tmp_path / "saved" / "graph.json").read_text())["inference"]
    model = make_model("conv", sync=False)
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1))
    graph(*batch("conv", 0, 0, 2))
    flow.save(graph, tmp_path / "single")
    single = json.loads((tmp_path / "single" / "graph.json").read_text())["inference"]
    for part in ("inputs", "outputs", "state"):
        assert saved[part] == single[part], f"the directory rank 0 saved differs in {part}"
    without_source = [[{k: v for k, v in node.items() if k != "loc"} for node in d["nodes"]] for d in (saved, single)]
    assert without_source[0] == without_source[1]


@pytest.mark.slow
def test_four_processes_equal_one_process(tmp_path):
    run_and_compare(tmp_path, 4, ["conv"])


def test_writes_of_data_parallelism_reach_detach_and_data_aliases(tmp_path):
    """Rank 0's broadcast (DDP and a data-parallel graph) and a graph's training steps write
    the tensors' values as in-place updates do: their detach()/.data handles follow."""
    check(launch("aliases.py", tmp_path))
    got = [np.load(tmp_path / f"aliases-rank{rank}.npz") for rank in range(2)]
    names = sorted({key.rsplit(".", 1)[0] for key in got[0].keys()})
    assert len(names) == 4
    apart = [f"{name} rank {rank}" for rank in range(2) for name in names
             if not np.array_equal(got[rank][f"{name}.alias"], got[rank][f"{name}.tensor"])]
    assert not apart, f"detach()/.data handles that no longer share their tensor's value: {apart}"
    for name in names:
        np.testing.assert_array_equal(got[0][f"{name}.tensor"], got[1][f"{name}.tensor"], err_msg=name)
