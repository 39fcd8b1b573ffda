"""The CUDA lowering of a training step, checked without a GPU.

The graph option ``"lowering": "cuda"`` lowers a graph as a CUDA device would
(``flowserve.nn.graph.lowering``) and runs that model on ONNX Runtime's CPU provider, so its
structure (static batch, node counts) and its numbers (equal to eager mode) are both
checked here. ``lower_traced(..., device="cuda")`` gives the model a real CUDA graph compiles.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import flowserve as flow
import flowserve.nn as nn
from flowserve.nn.graph.lowering import lower_traced, lowering_target, static_batch
from flowserve.ir.graph import GraphIR, Node, Value
from flowserve.nn.graph.lifecycle import trace_and_rewrite
from flowserve.onnx_backend.builder import Builder
from flowserve.onnx_backend.lowering.norm import lower_batch_norm_backward
from flowserve.onnx_backend.lowering.registry import LoweringContext
from flowserve.onnx_backend.lowering.split import merge_slices_into_split
from flowserve.onnx_backend import runtime

from tests.graph.helpers import TrainGraph, assert_close

STEPS = 3


def _convnet(seed: int = 0) -> nn.Module:
    flow.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, 2, 1, groups=2), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


def _data(batch: int = 4, seed: int = 3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, 3, 8, 8)).astype(np.float32), rng.integers(0, 5, batch)


def _sgd(model):
    return flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def _cuda_graph(model) -> TrainGraph:
    graph = TrainGraph(model, _sgd(model))
    graph.config.options["lowering"] = "cuda"  # the CUDA shape, run on ONNX Runtime's CPU provider
    return graph


def _cuda_model(model, x, y):
    """The ONNX model a graph on a CUDA device lowers ``model``'s training step to."""
    graph = TrainGraph(model, _sgd(model), provider="cuda")
    traced = trace_and_rewrite(graph, (flow.tensor(x), flow.tensor(y)), {})
    fed = [k for k in traced.ir.state if traced.ir.state_kinds[k] != "constant"]
    return lower_traced(traced, True, dict(graph.config.options), fed, dict(traced.constants), device="cuda",
                        dynamic_batch=True)


def _eager_step(model, opt, x, y) -> float:
    loss = nn.CrossEntropyLoss()(model(flow.tensor(x)), flow.tensor(y))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.numpy())


def _assert_same_state(ours, reference, rtol=1e-5):
    expected = reference.state_dict()
    for name, value in ours.state_dict().items():
        assert_close(value.numpy(), expected[name].numpy(), rtol=rtol, what=name)


def test_lowering_target_follows_the_provider(monkeypatch):
    assert lowering_target({}, "cpu") == "cpu"
    assert lowering_target({}, "cuda") == "cpu"  # no usable GPU here: the session runs on the CPU provider
    monkeypatch.setattr(runtime, "cuda_usable", lambda: True)
    assert lowering_target({}, "cuda") == "cuda" and lowering_target({}, "cpu") == "cpu"
    assert static_batch(True, {}, "cuda")
    monkeypatch.undo()
    assert lowering_target({"execution_provider": "cuda"}, "cuda") == "cuda"
    assert lowering_target({"execution_provider": "openvino"}, "cpu") == "standard"
    assert lowering_target({"lowering": "cuda"}, "cpu") == "cuda"
    assert static_batch(True, {"lowering": "cuda"}, "cpu") and not static_batch(False, {"lowering": "cuda"}, "cpu")
    assert not static_batch(True, {}, "cpu")
    with pytest.raises(ValueError, match="lowering"):
        lowering_target({"lowering": "tpu"}, "cpu")


def test_cuda_training_step_has_a_static_batch():
    x, y = _data()
    model = _cuda_model(_convnet(), x, y)
    ops = [n.op_type for n in model.graph.node]
    assert "Shape" not in ops
    dims = [d for v in model.graph.input for d in v.type.tensor_type.shape.dim]
    assert all(d.HasField("dim_value") for d in dims)  # no symbolic dim anywhere


def test_cpu_training_step_keeps_its_dynamic_batch():
    x, y = _data()
    model = _convnet()
    graph = TrainGraph(model, _sgd(model), provider="cpu")
    graph(flow.tensor(x), flow.tensor(y))
    assert graph._compiled.dynamic_batch
    assert graph._compiled.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param


def test_cuda_lowering_trains_as_eager_and_compiles_an_entry_per_batch_size():
    """Three steps at batch 4, then one at batch 3 (a new static entry), then batch 4 again
    (the first entry): losses, parameters and running statistics equal eager mode's."""
    graph_model, eager_model = _convnet(), _convnet()
    graph, opt = _cuda_graph(graph_model), _sgd(eager_model)
    batches = [_data(4, seed=s) for s in range(STEPS)] + [_data(3, seed=7), _data(4, seed=8)]
    for x, y in batches:
        loss = float(graph(flow.tensor(x), flow.tensor(y)).numpy())
        assert_close(loss, _eager_step(eager_model, opt, x, y), what="loss")
        compiled = graph._compiled
        assert not compiled.dynamic_batch and compiled.batch == x.shape[0]
        assert "Shape" not in [n.op_type for n in compiled.model.graph.node]
    _assert_same_state(graph_model, eager_model)


class _Residual(nn.Module):
    """Two batch norms reading the same gradient (a block and its downsampling branch), one
    without affine parameters, and a BatchNorm1d on (N, C) features."""

    def __init__(self):
        super().__init__()
        flow.manual_seed(1)
        self.conv = nn.Conv2d(3, 6, 3, 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.down = nn.Conv2d(3, 6, 1, 2, bias=False)
        self.down_bn = nn.BatchNorm2d(6, affine=False)
        self.fc = nn.Linear(6, 6)
        self.bn1d = nn.BatchNorm1d(6)
        self.head = nn.Linear(6, 5)

    def forward(self, x):
        x = (self.bn(self.conv(x)) + self.down_bn(self.down(x))).relu()
        x = x.mean((2, 3))
        return self.head(self.bn1d(self.fc(x)).relu())


def _ir_ops(graph) -> dict:
    counts: dict = {}
    for node in graph._compiled.model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


@pytest.mark.parametrize("make", [_convnet, _Residual], ids=["convnet", "residual"])
def test_cuda_batch_norm_and_relu_backward_train_as_eager(make):
    graph_model, eager_model = make(), make()
    graph, opt = _cuda_graph(graph_model), _sgd(eager_model)
    for step in range(STEPS):
        x, y = _data(4, seed=step)
        assert_close(float(graph(flow.tensor(x), flow.tensor(y)).numpy()), _eager_step(eager_model, opt, x, y),
                     what=f"loss {step}")
    _assert_same_state(graph_model, eager_model)  # weights, momenta, running mean and unbiased running var
    layers = sum(isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) for m in graph_model.modules())
    ops = _ir_ops(graph)
    # batch norm: the forward and the backward one inference-mode BatchNormalization each
    assert ops["BatchNormalization"] == 2 * layers
    modes = [a for n in graph._compiled.model.graph.node if n.op_type == "BatchNormalization" for a in n.attribute
             if a.name == "training_mode"]
    assert not modes
    assert ops.get("Sign", 0) == ops["Relu"] and "Greater" not in ops  # each ReLU's mask


def test_cpu_lowering_keeps_its_batch_norm_kernel():
    """The passes and lowerings above are the CUDA target's: on the CPU provider batch norm
    is still its training-mode kernel and the ReLU mask a comparison."""
    model = _convnet()
    graph = TrainGraph(model, _sgd(model), provider="cpu")
    x, y = _data()
    graph(flow.tensor(x), flow.tensor(y))
    ops = _ir_ops(graph)
    assert "Sign" not in ops
    modes = [a.i for n in graph._compiled.model.graph.node if n.op_type == "BatchNormalization" for a in n.attribute
             if a.name == "training_mode"]
    assert modes == [1, 1]


def test_cuda_step_node_count():
    """The whole step of the small convnet (two conv + batch norm + ReLU layers, a linear
    head, SGD with momentum): the count this lowering reaches, so that a change that adds
    nodes to it is seen."""
    x, y = _data()
    assert len(_cuda_model(_convnet(), x, y).graph.node) <= 155  # 181 without the CUDA backward passes


def _compute_input_dtypes(model) -> set:
    """The element types of the first inputs of the model's Conv/ConvTranspose/MatMul/Gemm nodes."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(inferred.graph.value_info) + list(inferred.graph.input)}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    return {types.get(n.input[0]) for n in model.graph.node if n.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm")}


def test_cuda_lowering_under_amp_runs_float16_kernels_and_trains_as_the_cpu_lowering():
    """``enable_amp``: on CUDA every convolution and matrix product reads float16
    (``flowserve.ir.passes.amp_native``), where the CPU lowering emulates float16 in float32;
    losses and parameters agree within float16's rounding, batch norm's backward is fused
    there too, and the traced IR (what ``flow.save`` writes) is the emulated one on both."""
    runs = []
    for lowering in ("cuda", "cpu"):
        model = _convnet()
        graph = TrainGraph(model, _sgd(model))
        graph.config.options["lowering"] = lowering
        graph.config.enable_amp(True)
        graph.set_grad_scaler(flow.amp.GradScaler(init_scale=1024.0))
        losses = [float(graph(flow.tensor(x), flow.tensor(y)).numpy()) for x, y in (_data(4, s) for s in range(STEPS))]
        runs.append((losses, model, graph))
    (cuda, cuda_model, cuda_graph), (cpu, cpu_model, cpu_graph) = runs
    np.testing.assert_allclose(cuda, cpu, rtol=2e-3)
    _assert_same_state(cuda_model, cpu_model, rtol=2e-3)
    ops = _ir_ops(cuda_graph)
    assert ops["BatchNormalization"] == 4 and "Shape" not in ops
    assert _compute_input_dtypes(cuda_graph._compiled.model) == {onnx.TensorProto.FLOAT16}
    assert _compute_input_dtypes(cpu_graph._compiled.model) == {onnx.TensorProto.FLOAT}
    for graph in (cuda_graph, cpu_graph):
        assert graph._compiled.traced.ir.attrs["amp"] == {"dtype": "float16", "native": False}


@pytest.mark.parametrize("outputs, nodes", [(["gx", "gb", "gw"], 13), (["gx", "gb"], 11)])
def test_batch_norm_backward_node_count(outputs, nodes):
    """The fused backward's ONNX nodes, given the forward's ``x - mean`` (PyTorch: one
    ``native_batch_norm_backward``); without it, two more compute it."""
    ir = GraphIR("g")
    for name, shape in [("g", (2, 4, 3, 3)), ("x", (2, 4, 3, 3)), ("gx", (2, 4, 3, 3))] + \
            [(n, (4,)) for n in ("w", "mean", "var", "gb", "gw")]:
        ir.add_value(Value(name, shape, "float32"))
    b = Builder(21)
    ctx = LoweringContext(ir, b, False, cuda_provider=True)
    ctx.saved[("batch_norm_centred", "x", "mean")] = "d"
    lower_batch_norm_backward(b, Node("fused.BatchNormBackward", ["g", "x", "w", "mean", "var"], outputs,
                                      {"eps": 1e-5}), ctx)
    assert len(b.nodes) == nodes
    assert [n.op_type for n in b.nodes].count("BatchNormalization") == 1


def test_fused_model_update_takes_its_pieces_back_in_one_split():
    """``allow_fuse_model_update_ops``: each flat buffer (parameters, momenta) is cut back
    into its tensors by one ``Split`` instead of one ``Slice`` per tensor; eager's numbers."""
    graph_model, eager_model = _convnet(), _convnet()
    graph, opt = _cuda_graph(graph_model), _sgd(eager_model)
    graph.config.allow_fuse_model_update_ops(True)
    for step in range(STEPS):
        x, y = _data(4, seed=step)
        assert_close(float(graph(flow.tensor(x), flow.tensor(y)).numpy()), _eager_step(eager_model, opt, x, y),
                     what=f"loss {step}")
    _assert_same_state(graph_model, eager_model)
    model = graph._compiled.model
    constants = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    assert _ir_ops(graph)["Split"] == 2
    assert not [n for n in model.graph.node if n.op_type == "Slice" and constants[n.input[3]] == [0]]  # no piece left


def _slices(ranges: list, length: int = 10):
    ir = GraphIR("g")
    ir.add_value(Value("flat", (length,), "float32"))
    b = Builder(21)
    for i, (start, end) in enumerate(ranges):
        b.op("Slice", ["flat", b.const([start]), b.const([end]), b.const([0]), b.const([1])], [f"piece{i}"])
    return b, ir


@pytest.mark.parametrize("ranges, splits", [([(0, 3), (3, 7)], 1), ([(3, 7), (0, 3), (7, 10)], 1),
                                            ([(0, 3), (4, 7)], 0), ([(0, 3)], 0), ([(1, 3), (3, 5)], 0)])
def test_consecutive_slices_become_one_split(ranges, splits):
    b, ir = _slices(ranges)
    assert merge_slices_into_split(b, ir.values) == splits
    if splits:
        (node,) = b.nodes
        assert node.op_type == "Split" and list(node.output[:len(ranges)]) == \
            [f"piece{i}" for i, _ in sorted(enumerate(ranges), key=lambda p: p[1][0])]
        sizes = list(numpy_helper.to_array(b.initializers[node.input[1]]))
        assert sum(sizes) == 10 and len(node.output) == len(sizes)  # a tail nothing reads is one more output
    else:
        assert [n.op_type for n in b.nodes] == ["Slice"] * len(ranges)
