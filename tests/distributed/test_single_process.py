"""The distributed API in a process that was not launched: flow.env's defaults, the
world-of-one communicator, DataParallel, DistributedSampler against PyTorch's, SyncBatchNorm
as BatchNorm, the launcher's argument checks and how a graph splits at collectives."""

from __future__ import annotations

import numpy as np
import pytest
import torch.utils.data

import flowserve as flow
import flowserve.nn as nn
from flowserve.distributed import LocalCommunicator
from flowserve.distributed.buckets import bucket_indices
from flowserve.distributed.launch import parse_args
from flowserve.distributed.segments import segment_of_nodes
from flowserve.errors import DistributedError, ShapeError
from flowserve.ir.graph import GraphIR, Node
from flowserve.utils.data import DataLoader, DistributedSampler, TensorDataset


def test_env_defaults_when_not_launched(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert (flow.env.get_rank(), flow.env.get_world_size(), flow.env.get_local_rank()) == (0, 1, 0)
    assert flow.env.init().world_size == 1


def test_env_rejects_bad_values(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(DistributedError, match="WORLD_SIZE must be an integer, got 'two'"):
        flow.env.get_world_size()
    monkeypatch.setenv("FLOWSERVE_DIST_TIMEOUT", "-3")
    with pytest.raises(DistributedError, match="FLOWSERVE_DIST_TIMEOUT must be positive"):
        flow.env.timeout_s()


def test_local_communicator_is_the_identity():
    comm = LocalCommunicator()
    a = np.arange(4, dtype=np.float32)
    assert comm.allreduce(a) is a
    np.testing.assert_array_equal(comm.reduce_scatter(a), a)
    np.testing.assert_array_equal(comm.all_gather(a), a)
    with pytest.raises(DistributedError, match="only rank"):
        comm.send(a, 1)


@pytest.mark.parametrize("n,replicas,drop_last,shuffle", [(10, 3, False, False), (10, 3, True, False),
                                                          (7, 2, False, True), (12, 4, True, True)])
def test_distributed_sampler_matches_pytorch_partition(n, replicas, drop_last, shuffle):
    ours = [DistributedSampler(range(n), replicas, r, shuffle=shuffle, drop_last=drop_last) for r in range(replicas)]
    theirs = [torch.utils.data.DistributedSampler(range(n), replicas, r, shuffle=False, drop_last=drop_last)
              for r in range(replicas)]
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    if not shuffle:
        assert [list(s) for s in ours] == [list(s) for s in theirs]
    together = sorted(i for s in ours for i in s)
    assert set(together) == set(range(n)) if not drop_last else len(set(together)) == len(together)


def test_distributed_sampler_set_epoch_reshuffles_the_same_on_every_rank():
    samplers = [DistributedSampler(range(20), 2, r, seed=3) for r in range(2)]
    first = [list(s) for s in samplers]
    for s in samplers:
        s.set_epoch(1)
    second = [list(s) for s in samplers]
    assert first != second
    assert sorted(second[0] + second[1]) == list(range(20))
    loader = DataLoader(TensorDataset(flow.arange(8)), batch_size=2, sampler=DistributedSampler(range(8), 2, 1))
    assert sum(len(b[0]) for b in loader) == 4
    with pytest.raises(ValueError, match=r"rank should be in the interval \[0, 1\]"):
        DistributedSampler(range(4), 2, 2)


def test_data_parallel_runs_the_module_and_prefixes_its_state():
    model = nn.Linear(3, 2)
    wrapped = nn.parallel.DataParallel(model)
    x = flow.randn(4, 3)
    np.testing.assert_array_equal(wrapped(x).numpy(), model(x).numpy())
    assert list(wrapped.state_dict()) == ["module.weight", "module.bias"]
    with pytest.raises(ValueError, match="one process per device"):
        nn.parallel.DataParallel(model, device_ids=[0, 1])


def test_sync_batch_norm_in_one_process_is_batch_norm():
    flow.manual_seed(0)
    bn = nn.BatchNorm2d(3)
    sync = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.BatchNorm2d(3)))[0]
    x = flow.randn(4, 3, 2, 2, requires_grad=True)
    y_ref = bn(x)
    y = sync(x)
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sync.running_var.numpy(), bn.running_var.numpy(), rtol=1e-6)
    with pytest.raises(ShapeError, match=r"SyncBatchNorm expected input \(N, 3, \*\)"):
        sync(flow.randn(4, 5, 2, 2))


def test_ddp_in_one_process_trains_as_the_module():
    flow.manual_seed(0)
    model = nn.Linear(3, 1)
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp(flow.ones(2, 3)).sum().backward()
    np.testing.assert_array_equal(model.weight.grad.numpy(), np.full((1, 3), 2.0, np.float32))
    assert list(ddp.state_dict()) == ["module.weight", "module.bias"]


def test_launcher_checks_its_arguments(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--nproc_per_node", "0", "train.py"])
    assert "--nproc_per_node must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--nnodes", "2", "--node_rank", "2", "train.py"])
    assert "--node_rank must be < --nnodes (2), got 2" in capsys.readouterr().err
    args = parse_args(["--nproc_per_node", "2", "train.py", "--lr", "0.1"])
    assert (args.script, args.script_args) == ("train.py", ["--lr", "0.1"])


def test_buckets_keep_backward_order_under_the_cap():
    assert bucket_indices([4, 4, 4, 8], 8) == [[3], [2, 1], [0]]
    assert bucket_indices([100], 8) == [[0]]


def test_segments_count_collectives_on_the_longest_path():
    ir = GraphIR("g")
    ir.nodes = [Node("relu", ["x"], ["a"]), Node("all_reduce", ["a"], ["b"]), Node("add", ["b", "a"], ["c"]),
                Node("neg", ["x"], ["d"]), Node("all_reduce", ["c"], ["e"]), Node("mul", ["e", "d"], ["f"])]
    assert segment_of_nodes(ir) == [0, 0, 1, 0, 1, 2]


def test_pipeline_stage_assignment_keeps_each_update_with_its_parameters(monkeypatch):
    from flowserve.distributed.stages import ATTR
    from flowserve.nn.graph import GraphModule
    from flowserve.nn.graph.lifecycle import trace_and_rewrite
    from tests.distributed.training import TrainGraph, TwoStages, batch

    monkeypatch.setenv("WORLD_SIZE", "2")  # traced as rank 0 of two; nothing is compiled or joined
    model = TwoStages()
    graph = TrainGraph(model, flow.optim.AdamW(model.parameters()), accumulation=4)
    graph.model.front.to(GraphModule).set_stage(0, [0])
    graph.model.back.to(GraphModule).set_stage(1, [1])
    ir = trace_and_rewrite(graph, batch("mlp", 0), {}).ir
    stage_of = ir.attrs[ATTR]
    value_stage = {o: stage_of.get(n.outputs[0]) for n in ir.nodes for o in n.outputs}
    for state, value in ir.updates.items():
        if state.startswith("model."):
            assert value_stage[value] == (0 if state.startswith("model.front") else 1), state
    for node in ir.nodes:
        if node.scope.startswith("model.front") or node.scope.startswith("model.back"):
            assert stage_of[node.outputs[0]] == (0 if node.scope.startswith("model.front") else 1), node
        if node.scope == "loss_fn":
            assert stage_of[node.outputs[0]] == 1
