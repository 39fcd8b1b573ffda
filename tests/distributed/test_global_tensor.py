"""Global tensors (OneFlow's placement and sbp): creation, local <-> global, boxing between
every pair of sbps, sbp inference and autograd through it, checked against numpy and
PyTorch on the logical tensors, in one process and in two launched on loopback."""

from __future__ import annotations

import json

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import DistributedError, GraphError
from tests.distributed.global_cases import check, run
from tests.distributed.helpers import check as check_run
from tests.distributed.helpers import launch


def test_global_tensors_in_one_process_match_numpy_and_torch():
    check([run(0, 1)], world=1)


def test_global_tensors_over_two_processes_match_numpy_and_torch(tmp_path):
    check_run(launch("global_tensor.py", tmp_path, nproc=2, wall_s=120))
    results = []
    for rank in range(2):
        arrays = dict(np.load(tmp_path / f"rank{rank}.npz"))
        arrays = {k: (str(v) if v.dtype.kind == "U" else v) for k, v in arrays.items()}
        results.append((arrays, json.loads((tmp_path / f"rank{rank}.json").read_text())))
    check(results, world=2)


def test_placement_and_sbp_as_oneflow_spells_them():
    pl = flow.placement("cpu", ranks=[0])
    assert pl == flow.placement(type="cpu", ranks=[0]) == flow.placement.all("cpu")
    assert repr(pl) == 'flowserve.placement(type="cpu", ranks=[0])' and pl.hierarchy == [1]
    assert repr(flow.sbp.split(1)) == "flowserve.sbp.split(dim=1)" and flow.sbp.split(1) == flow.sbp.split(1)
    assert isinstance(flow.sbp.broadcast, flow.sbp.sbp) and flow.sbp.partial_sum != flow.sbp.broadcast
    x = flow.zeros(2, 3, placement=pl, sbp=[flow.sbp.broadcast])
    assert x.is_global and not x.is_local and x.placement == pl and x.sbp == (flow.sbp.broadcast,)
    assert not flow.zeros(2).is_global and flow.zeros(2).is_local
    assert not hasattr(flow.zeros(2), "placement") and not hasattr(flow.zeros(2), "sbp")


@pytest.mark.parametrize("make,message", [
    (lambda: flow.placement("tpu", ranks=[0]), "type must be one of ('cpu', 'cuda'), got 'tpu'"),
    (lambda: flow.placement("cpu", ranks=[[0, 1], [2, 3]]), "form a 2-d hierarchy"),
    (lambda: flow.placement("cpu", {0: [0, 1]}), "the {machine: [devices]} form"),
    (lambda: flow.sbp.split(-1), "expects a dimension >= 0, got -1"),
    (lambda: flow.ones(2).to_global(flow.placement("cpu", ranks=[0, 1]), flow.sbp.broadcast),
     "placement ranks [0, 1] do not match the run's ranks [0]"),
    (lambda: flow.ones(2).to_global(flow.placement.all("cpu"), (flow.sbp.split(0), flow.sbp.broadcast)),
     "expected one sbp"),
    (lambda: flow.ones(2).to_global(sbp=flow.sbp.broadcast), "needs both placement= and sbp="),
    (lambda: flow.ones(2).to_global(flow.placement.all("cpu"), flow.sbp.split(1)), "split(dim=1) needs a tensor"),
    (lambda: flow.ones(2).to_global(flow.placement.all("cpu"), flow.sbp.broadcast, grad_sbp="B"),
     "to_global(grad_sbp=): expected flow.sbp.split(dim), flow.sbp.broadcast or flow.sbp.partial_sum, got 'B'"),
    (lambda: flow.ones(2).to_local(), "to_local() expects a global tensor"),
    (lambda: flow.ones(2).placement, "a local tensor has no placement"),
])
def test_bad_placements_and_conversions_say_what_was_expected(make, message):
    with pytest.raises(DistributedError) as info:
        make()
    assert message in str(info.value)


def test_ops_without_an_sbp_rule_name_the_op_and_the_sbps():
    pl = flow.placement.all("cpu")
    x = flow.randn(4, 3, placement=pl, sbp=flow.sbp.split(0))
    with pytest.raises(DistributedError, match=r"amax on global tensors: the sbp combination "
                                                r"\(flowserve.sbp.split\(dim=0\)\) is not supported \(a reduction "
                                                r"over the split dim\); convert the inputs first, for example "
                                                r"x.to_global\(sbp=flow.sbp.broadcast\)"):
        x.max()
    with pytest.raises(DistributedError, match=r"softmax on global tensors: .* \(axis 0 is the split dim\)"):
        x.softmax(dim=0)
    assert x.to_global(sbp=flow.sbp.broadcast).softmax(dim=0).sbp == (flow.sbp.broadcast,)
    with pytest.raises(DistributedError, match="use .to_local\\(\\) for this rank's piece"):
        x._data  # a kernel reading a global tensor's values directly


def test_a_global_input_runs_on_one_process_and_a_captured_one_is_a_clear_error():
    class G(nn.Graph):
        def build(self, x):
            return x * 2

    x = flow.ones(2, 2, placement=flow.placement.all("cpu"), sbp=flow.sbp.broadcast)
    out = G()(x)  # one process: the graph runs on the input's whole value (tests/graph/test_graph_oneflow_names.py)
    assert out.is_global and out.numpy().tolist() == [[2.0, 2.0], [2.0, 2.0]]

    class Captures(nn.Graph):
        def build(self, y):
            return y + x

    with pytest.raises(GraphError, match="a global tensor .* reached nn.Graph .*: graphs take local tensors"):
        Captures()(flow.ones(2, 2))


def test_creation_functions_take_placement_and_sbp():
    pl, s0 = flow.placement.all("cpu"), flow.sbp.split(0)
    flow.manual_seed(3)
    expected = flow.randn(4, 2).numpy()
    flow.manual_seed(3)
    np.testing.assert_array_equal(flow.randn(4, 2, placement=pl, sbp=s0).numpy(), expected)
    np.testing.assert_array_equal(flow.arange(6, placement=pl, sbp=s0).numpy(), np.arange(6))
    np.testing.assert_array_equal(flow.full((2, 2), 7.0, placement=pl, sbp=flow.sbp.broadcast).numpy(),
                                  np.full((2, 2), 7.0))
    x = flow.ones(3, placement=pl, sbp=s0, requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 2.0))
    assert "placement=flowserve.placement(type=\"cpu\", ranks=[0]), sbp=(flowserve.sbp.split(dim=0),)" in repr(x)
