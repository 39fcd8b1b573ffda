"""The CUDA lowering's passes on traced training steps: ReLU's mask as a sign (the same
numbers, by the IR interpreter), batch norm's backward as one fused node (and left alone
where another node reads its intermediates), AMP's emulated float16 as native float16, a
convolution gradient's reshape-permute-reshape as one permute."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.ir.graph import Node, Value
from flowserve.ir.interpreter import run_ir
from flowserve.ir.passes.amp_native import amp_native_float16
from flowserve.ir.passes.batch_norm_grad import FUSED_OP, fuse_batch_norm_backward
from flowserve.ir.passes.relu_grad import relu_grad_as_sign
from flowserve.ir.passes.unit_reshapes import collapsed_permutation, collapse_unit_reshapes
from flowserve.nn.graph.lifecycle import trace_and_rewrite

from tests.graph.helpers import TrainGraph


def _traced(model, x, y, amp=None):
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    if amp is not None:
        graph.config.enable_amp(True, dtype=amp)
    return trace_and_rewrite(graph, (flow.tensor(x), flow.tensor(y)), {})


def _state(traced) -> dict:
    return {**traced.constants, **{k: t.numpy() for k, t in traced.state.items()}}


def _assert_in_order(ir) -> None:
    """Every value a node reads is defined before it (``GraphIR.validate`` knows no fused op)."""
    defined = {v.name for v in ir.inputs} | set(ir.state)
    for node in ir.nodes:
        assert set(node.inputs) <= defined, (node.op, set(node.inputs) - defined)
        defined.update(node.outputs)
    assert {v.name for v in ir.outputs} | set(ir.updates.values()) <= defined


def _ops(ir) -> list:
    return [n.op for n in ir.nodes]


def test_relu_mask_is_a_sign_with_the_same_numbers():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 6)).astype(np.float32), rng.integers(0, 3, 5)
    traced = _traced(model, x, y)
    before = run_ir(traced.ir, {"x": x, "y": y}, _state(traced))
    ir = traced.ir.copy()
    result = relu_grad_as_sign(ir, traced.constants)
    assert result.modified
    assert _ops(ir).count("sign") == _ops(ir).count("relu") == 2 and "gt" not in _ops(ir)
    ir.validate()
    after = run_ir(ir, {"x": x, "y": y}, _state(traced))
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)
    assert not relu_grad_as_sign(ir, traced.constants).modified  # nothing left to rewrite


def _bn_traced():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, 1, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Conv2d(4, 4, 3, 1, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 5 * 5, 3))
    rng = np.random.default_rng(1)
    return _traced(model, rng.standard_normal((2, 3, 5, 5)).astype(np.float32), rng.integers(0, 3, 2))


def test_batch_norm_backward_is_one_node_per_layer():
    traced = _bn_traced()
    ir = traced.ir.copy()
    nodes = len(ir.nodes)
    assert fuse_batch_norm_backward(ir, traced.constants).modified
    fused = [n for n in ir.nodes if n.op == FUSED_OP]
    assert len(fused) == _ops(ir).count("batch_norm_train") == 2
    assert nodes - len(ir.nodes) == 2 * 22  # 23 nodes of the vjp become one, per layer
    for node in fused:  # (g, x, weight, mean, var) -> (gx, gb, gw)
        assert len(node.inputs) == 5 and len(node.outputs) == 3
    _assert_in_order(ir)


def test_a_layer_whose_intermediates_are_read_elsewhere_is_left_alone():
    traced = _bn_traced()
    ir = traced.ir.copy()
    bn = next(n for n in ir.nodes if n.op == "batch_norm_train")
    centred = next(n for n in ir.nodes if n.op == "sub" and n.inputs[0] == bn.inputs[0])  # x - mean
    ir.add_value(Value("extra", ir.values[centred.outputs[0]].shape, "float32"))
    ir.nodes.append(Node("neg", [centred.outputs[0]], ["extra"]))
    ir.outputs.append(ir.values["extra"])
    assert fuse_batch_norm_backward(ir, traced.constants).modified
    assert _ops(ir).count(FUSED_OP) == 1  # the other layer only
    assert centred in ir.nodes


def _mlp_amp(dtype):
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    rng = np.random.default_rng(0)
    return _traced(model, rng.standard_normal((5, 6)).astype(np.float32), rng.integers(0, 3, 5), amp=dtype)


def test_emulated_float16_compute_becomes_native():
    traced = _mlp_amp(flow.float16)
    ir = traced.ir.copy()
    casts = _ops(ir).count("cast")
    assert amp_native_float16(ir).modified
    matmuls = [n for n in ir.nodes if n.op == "matmul"]
    assert matmuls and all(ir.values[i].dtype == "float16" for n in matmuls for i in n.inputs + n.outputs)
    # each rounded input's cast back to float32 (shared by its readers) and each output's rounding cast go
    inputs = {i for n in matmuls for i in n.inputs}
    assert casts - _ops(ir).count("cast") == len(inputs) + len(matmuls)
    _assert_in_order(ir)
    assert ir.attrs["amp"]["native"] is False  # the saved form is still the emulated one
    assert not amp_native_float16(ir).modified


def test_bfloat16_stays_emulated():
    traced = _mlp_amp(flow.bfloat16)
    assert not amp_native_float16(traced.ir.copy()).modified


@pytest.mark.parametrize("s0, s1, perm, s3, expected", [
    ((2, 3, 5, 5), (2, 1, 3, 5, 5), [2, 1, 0, 3, 4], (3, 2, 5, 5), [1, 0, 2, 3]),  # one group
    ((1, 4, 3, 3), (1, 1, 4, 3, 3), [2, 1, 0, 3, 4], (4, 1, 3, 3), [1, 0, 2, 3]),  # batch 1
    ((2, 6, 5, 5), (2, 2, 3, 5, 5), [2, 1, 0, 3, 4], (3, 4, 5, 5), None),  # two groups: a real regroup
    ((2, 3, 5, 5), (2, 1, 3, 5, 5), [2, 1, 0, 3, 4], (3, 2, 25), None),  # the output merges dims
])
def test_unit_reshape_permutation(s0, s1, perm, s3, expected):
    assert collapsed_permutation(s0, s1, perm, s3) == expected


def test_unit_reshapes_collapse_with_the_same_numbers():
    traced = _bn_traced()
    state = _state(traced)
    rng = np.random.default_rng(1)
    inputs = {"x": rng.standard_normal((2, 3, 5, 5)).astype(np.float32), "y": rng.integers(0, 3, 2)}
    before = run_ir(traced.ir, inputs, state)
    ir = traced.ir.copy()
    reshapes = _ops(ir).count("reshape")
    assert collapse_unit_reshapes(ir).modified
    assert reshapes - _ops(ir).count("reshape") >= 4  # each conv's weight gradient: two chains
    ir.validate()
    after = run_ir(ir, inputs, state)
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)
