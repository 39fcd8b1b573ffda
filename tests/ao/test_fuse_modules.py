"""``fuse_modules`` / ``fuse_modules_qat`` by dotted name, against PyTorch's
(``torch.ao.quantization``): BatchNorm folded as ``fuse_conv_bn_eval`` folds it; the fused
QAT modules compute PyTorch's fake-quantized outputs and gradients; a ResNet block fused by
name trains the same in eager mode and in a graph, and its int8 export gives the QAT graph's
outputs within one quantization step."""

from __future__ import annotations

import copy
import collections

import numpy as np
import onnx
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.ao import quantization as Q
from flowserve.exporter.verified import export_verified
from flowserve.models.resnet import BasicBlock
from flowserve.nn import intrinsic
from flowserve.nn.qat import modules as qat
from flowserve.nn.qat.prepare import qconfig_from_graph_options
from flowserve.onnx_backend.providers import create_session
from tests.ao.qat_models import images, labels
from tests.ao.test_fake_quant_torch import _torch_activation_fq, _torch_weight_fq
from tests.ao.test_qat_graph import TrainGraph, _state, train_side_by_side
from tests.exporter.test_qat_export import EvalGraph, onnx_runtime_optimised_ops
from tests.precision import assert_close_in_format

torch = pytest.importorskip("torch")
from torch.ao import quantization as TQ  # noqa: E402


class ConvBnReLU(nn.Module):
    """The layers a block calls as attributes, outside an ``nn.Sequential``."""

    def __init__(self, parts=("conv", "bn", "relu"), bias: bool = True, seed: int = 0):
        super().__init__()
        flow.manual_seed(seed)
        self.parts = parts
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=bias)
        if "bn" in parts:
            self.bn = nn.BatchNorm2d(6)
        if "relu" in parts:
            self.relu = nn.ReLU()

    def forward(self, x):
        for name in self.parts:
            x = getattr(self, name)(x)
        return x


class TorchConvBnReLU(torch.nn.Module):
    """The same layers in PyTorch, between the stubs its eager quantization needs."""

    def __init__(self, ours: ConvBnReLU):
        super().__init__()
        self.parts = ours.parts
        self.quant, self.dequant = TQ.QuantStub(), TQ.DeQuantStub()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1, bias=ours.conv.bias is not None)
        if "bn" in self.parts:
            self.bn = torch.nn.BatchNorm2d(6)
        if "relu" in self.parts:
            self.relu = torch.nn.ReLU()
        self.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})

    def forward(self, x):
        x = self.quant(x)
        for name in self.parts:
            x = getattr(self, name)(x)
        return self.dequant(x)


def _with_statistics(model: ConvBnReLU) -> ConvBnReLU:
    """BatchNorm with running statistics and an affine transform away from their defaults."""
    if "bn" in model.parts:
        rng = np.random.default_rng(11)
        bn = model.bn
        with flow.no_grad():
            for name, values in (("running_mean", rng.normal(0, 0.5, 6)),
                                 ("running_var", rng.uniform(0.2, 3.0, 6)),
                                 ("weight", rng.uniform(0.5, 1.5, 6)), ("bias", rng.normal(0, 0.3, 6))):
                getattr(bn, name).copy_(flow.tensor(values.astype(np.float32)))
    return model


FUSED = {("conv", "bn", "relu"): intrinsic.ConvBnReLU2d, ("conv", "bn"): intrinsic.ConvBn2d,
         ("conv", "relu"): intrinsic.ConvReLU2d}


def _torch_qconfig():
    return TQ.QConfig(activation=_torch_activation_fq, weight=_torch_weight_fq)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_fuse_modules_folds_batch_norm_as_torch(bias):
    ours = _with_statistics(ConvBnReLU(bias=bias)).eval()
    theirs = TorchConvBnReLU(ours).eval()
    fused = Q.fuse_modules(ours, ["conv", "bn", "relu"])
    torch_fused = TQ.fuse_modules(theirs, ["conv", "bn", "relu"])
    assert type(fused.conv) is intrinsic.ConvReLU2d and type(fused.conv[0]) is nn.Conv2d
    assert isinstance(fused.bn, nn.Identity) and isinstance(fused.relu, nn.Identity)
    for ours_w, theirs_w in ((fused.conv[0].weight, torch_fused.conv[0].weight),
                             (fused.conv[0].bias, torch_fused.conv[0].bias)):
        assert_close_in_format(ours_w.numpy(), theirs_w.detach().numpy(), "float32", roundings=2)
    x = images(batch=4, size=9)
    want = torch_fused(torch.tensor(x.numpy())).detach().numpy()
    assert_close_in_format(fused(x).numpy(), want, "float32", roundings=4, terms=27)
    assert_close_in_format(fused(x).numpy(), ours(x).numpy(), "float32", roundings=4, terms=27)
    assert type(ours.bn) is nn.BatchNorm2d  # not in place: the model given is unchanged


def test_fuse_linear_batch_norm_and_the_other_eval_sequences_as_torch():
    flow.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Conv2d(1, 1, 1), nn.ReLU(), nn.BatchNorm2d(1),
                          nn.ReLU())
    model[1].running_mean.copy_(flow.tensor(np.array([0.3, -0.2, 0.1, 0.5], np.float32)))
    model[1].running_var.copy_(flow.tensor(np.array([0.5, 2.0, 1.5, 0.7], np.float32)))
    model.eval()
    fused = Q.fuse_modules(model, [["0", "1"], ["2", "3"], ["4", "5"]])
    assert [type(m).__name__ for m in fused] == ["Linear", "FusedAway", "ConvReLU2d", "FusedAway", "BNReLU2d",
                                                 "FusedAway"]
    x = flow.tensor(np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32))
    want = model[1](model[0](x))
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4)).eval()
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model[:2].state_dict().items()})
    torch_linear = TQ.fuse_modules(theirs, ["0", "1"])[0]
    assert_close_in_format(fused[0].weight.numpy(), torch_linear.weight.detach().numpy(), "float32", roundings=2)
    assert_close_in_format(fused[0].bias.numpy(), torch_linear.bias.detach().numpy(), "float32", roundings=2)
    assert_close_in_format(fused[0](x).numpy(), want.numpy(), "float32", roundings=4, terms=5)


@pytest.mark.parametrize("parts", [("conv", "bn", "relu"), ("conv", "bn"), ("conv", "relu")],
                         ids=["ConvBnReLU2d", "ConvBn2d", "ConvReLU2d"])
def test_fuse_modules_qat_trains_as_torch(parts):
    """Three training calls of the fused QAT module: the fake-quantized output, the gradients
    of the input, weight and BatchNorm, and the running statistics, call after call."""
    ours = _with_statistics(ConvBnReLU(parts))
    theirs = TorchConvBnReLU(ours).train()
    fused = Q.fuse_modules_qat(ours, [list(parts)])
    assert type(fused.conv) is FUSED[parts]
    prepared = Q.prepare_qat(fused)
    assert type(prepared.conv[0]) is (qat.ConvBn2d if "bn" in parts else qat.Conv2d)
    theirs.qconfig = _torch_qconfig()
    torch_prepared = TQ.prepare_qat(TQ.fuse_modules_qat(theirs, [list(parts)]))
    assert type(torch_prepared.conv).__module__.startswith("torch.ao.nn.intrinsic.qat")
    rng = np.random.default_rng(5)
    for step in range(3):
        x = (rng.standard_normal((4, 3, 8, 8)) * (1 + step)).astype(np.float32)
        g = rng.standard_normal((4, 6, 8, 8)).astype(np.float32)
        xt, tx = flow.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        prepared.zero_grad()
        torch_prepared.zero_grad()
        y = prepared(xt)
        (y * flow.tensor(g)).sum().backward()
        ty = torch_prepared(tx)
        (ty * torch.tensor(g)).sum().backward()
        step_size = float(torch_prepared.conv.activation_post_process.scale)
        _assert_within_a_step(y.numpy(), ty.detach().numpy(), step_size, f"output, call {step}")
        grads = {"input": (xt.grad, tx.grad), "weight": (prepared.conv[0].weight.grad if "bn" not in parts
                                                          else prepared.conv[0].conv.weight.grad,
                                                          torch_prepared.conv.weight.grad)}
        if "bn" in parts:
            grads["bn.weight"] = (prepared.conv[0].bn.weight.grad, torch_prepared.conv.bn.weight.grad)
            grads["bn.bias"] = (prepared.conv[0].bn.bias.grad, torch_prepared.conv.bn.bias.grad)
            grads["running_var"] = (prepared.conv[0].bn.running_var, torch_prepared.conv.bn.running_var)
        for name, (a, b) in grads.items():
            ref = b.detach().numpy()
            np.testing.assert_allclose(a.numpy(), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()),
                                       err_msg=f"{name}, call {step}")


def _assert_within_a_step(got, want, step: float, what: str) -> None:
    """Equal but where a value on a rounding boundary lands on the neighbouring step (the
    convolutions sum in another order): at most one step, on few elements."""
    off = np.abs(got.astype(np.float64) - want) / step
    assert off.max() <= 1 + 1e-3, f"{what}: {off.max():.2f} steps"
    assert np.mean(off > 1e-3) <= 0.002, f"{what}: {np.mean(off > 1e-3):.2%} of the elements off"


class TinyResNet(nn.Module):
    """ResNet's stem and two ``BasicBlock``s (one with a downsampling shortcut), small."""

    def __init__(self, classes: int = 5, seed: int = 0):
        super().__init__()
        flow.manual_seed(seed)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        shortcut = nn.Sequential(nn.Conv2d(8, 12, 1, 2, bias=False), nn.BatchNorm2d(12))
        self.layer1 = nn.Sequential(BasicBlock(8, 12, 2, shortcut), BasicBlock(12, 12))
        self.fc = nn.Linear(12, classes)

    def forward(self, x):
        x = self.layer1(self.relu(self.bn1(self.conv1(x))))
        return self.fc(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


# what a PyTorch user names: the stem with its (once-called) relu; each block's conv/bn pairs
# (its relu is called twice) and the shortcut's
RESNET_GROUPS = [["conv1", "bn1", "relu"]] + [[f"layer1.{b}.conv{i}", f"layer1.{b}.bn{i}"] for b in (0, 1)
                                              for i in (1, 2)] + [["layer1.0.downsample.0", "layer1.0.downsample.1"]]


def _fused_resnet() -> TinyResNet:
    return Q.fuse_modules_qat(TinyResNet(), RESNET_GROUPS)


def test_prepare_qat_folds_every_batch_norm_of_a_fused_resnet():
    prepared = Q.prepare_qat(_fused_resnet())
    assert not [n for n, m in prepared.named_modules() if type(m) is nn.BatchNorm2d and
                not n.endswith(".bn")], "a BatchNorm2d outside a fused ConvBn2d"
    assert sum(isinstance(m, qat.ConvBn2d) for m in prepared.modules()) == 6
    assert type(prepared.conv1[0]) is qat.ConvBn2d and type(prepared.conv1[0].act) is nn.ReLU
    unfused = Q.prepare_qat(TinyResNet())
    assert sum(isinstance(m, qat.ConvBn2d) for m in unfused.modules()) == 1  # the shortcut, a Sequential


def test_fused_resnet_qat_graph_equals_eager_for_three_steps():
    """As tests/ao/test_qat_graph.py. The block's shared relu runs after the fused conv1's
    quantized output, and conv2 quantizes it again at its own scale: a value on one grid
    read on another lands next to .5 ties (level k of a range of K levels is 255 k / K on
    the new one: 1.5 for K = 170), which eager mode and the graph must round alike."""
    graph_model = _fused_resnet()
    eager_model = copy.deepcopy(graph_model)
    graph = TrainGraph(graph_model, flow.optim.SGD(graph_model.parameters(), lr=0.05, momentum=0.9), {})
    eager = Q.prepare_qat(eager_model, qconfig_from_graph_options(graph.config.options))
    batches = [(images(seed=step), labels(seed=10 + step)) for step in range(3)]
    train_side_by_side(graph, eager, batches, rtol=1e-4)
    ours, theirs = _state(graph_model), _state(eager)
    assert sorted(ours) == sorted(theirs) and any(k.endswith("conv1.0.bn.running_var") for k in ours)
    for name in ours:
        ref = theirs[name]
        np.testing.assert_allclose(ours[name], ref, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(ref).max())),
                                   err_msg=name)


def test_fused_resnet_int8_export_matches_the_qat_graph(tmp_path):
    model = _fused_resnet()
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), {})
    for step in range(4):
        graph(images(seed=step), labels(seed=10 + step))
    folder = tmp_path / "resnet"
    flow.save(graph, folder, examples=[images(seed=100 + i) for i in range(3)])
    result = export_verified(folder, tmp_path / "resnet.int8.onnx", precision="int8", force=True)
    ops = collections.Counter(n.op_type for n in result.model.graph.node)
    assert ops["BatchNormalization"] == 0 and ops["Conv"] == 6
    weights = [t for t in result.model.graph.initializer if "_quantized" in t.name]
    assert len(weights) == 7 and all(t.data_type == onnx.TensorProto.INT8 for t in weights)  # 6 convs, 1 linear
    optimised = onnx_runtime_optimised_ops(result.model, tmp_path / "optimised.onnx")
    assert optimised["QLinearConv"] == 6 and optimised["QLinearAdd"] == 2 and optimised["QGemm"] == 1
    # all integer: BatchNorm folded (no float Mul/Add left but the average pool's 1/n), ReLUs absorbed
    assert optimised["Conv"] == optimised["Relu"] == optimised["Add"] == 0 and optimised["Mul"] == 1
    session = create_session(result.model, device="cpu")
    model.eval()
    x = images(batch=16, seed=200)
    expected = EvalGraph(model)(x).numpy()
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    step = float(model.fc.output_fake_quant.scale[0])
    np.testing.assert_allclose(got, expected, rtol=0, atol=step * (1 + 1e-3))


def test_a_module_called_twice_is_refused_where_its_place_is_called_again():
    """BasicBlock calls one relu after bn1 and after the residual sum: fused into conv1, its
    place would drop the second ReLU (PyTorch does so silently)."""
    block = BasicBlock(4, 4).eval()
    fused = Q.fuse_modules(block, ["conv1", "bn1", "relu"])
    with pytest.raises(ValueError, match=r"relu was fused into conv1 .* calls relu elsewhere too"):
        fused(flow.randn(2, 4, 5, 5))
    with pytest.raises(ValueError, match="relu was fused into conv1"):  # traced in a graph alike
        EvalGraph(fused)(flow.randn(2, 4, 5, 5))
    prepared = Q.prepare_qat(Q.fuse_modules_qat(block.train(), ["conv1", "bn1", "relu"]))
    with pytest.raises(ValueError, match="relu was fused into conv1"):
        prepared(flow.randn(2, 4, 5, 5))
    fine = Q.prepare_qat(Q.fuse_modules_qat(block, [["conv1", "bn1"], ["conv2", "bn2"]]))
    assert fine(flow.randn(2, 4, 5, 5)).shape == (2, 4, 5, 5)
    assert Q.convert(fine)(flow.randn(2, 4, 5, 5)).shape == (2, 4, 5, 5)
    # folded for inference, then prepared: the quantized layer keeps the check of its places
    folded = Q.prepare_qat(Q.fuse_modules(block.eval(), [["conv1", "bn1"], ["conv2", "bn2"]]).train())
    assert type(folded.conv1) is qat.Conv2d and isinstance(folded.bn1, nn.Identity)
    assert folded(flow.randn(2, 4, 5, 5)).shape == (2, 4, 5, 5)


@pytest.mark.parametrize("groups,error,message", [
    (["conv", "bn9"], AttributeError, r"submodules of ConvBnReLU, got 'bn9'"),
    ("conv", TypeError, r"a list of module names .* got 'conv'"),
    ([["conv", "bn"], 3], TypeError, r"list of such lists, got \[\['conv', 'bn'\], 3\]"),
    (["bn", "conv"], ValueError, r"expected one of the sequences \(Conv2d, BatchNorm2d\).* got \['bn', 'conv'\] "
                                 r"of types \(BatchNorm2d, Conv2d\)"),
    (["conv"], ValueError, r"got \['conv'\] of types \(Conv2d\)"),
    ([["conv", "bn"], ["conv", "relu"]], ValueError, r"each module named once .* got \['conv'\] more than once"),
    (["conv.weight", "bn"], AttributeError, r"got 'conv.weight': Conv2d has no submodule 'weight'"),
])
def test_bad_names_and_sequences_are_refused(groups, error, message):
    model = ConvBnReLU().eval()
    with pytest.raises(error, match=message):
        Q.fuse_modules(model, groups)
    assert type(model.conv) is nn.Conv2d


def test_fusing_batch_norm_for_inference_needs_eval_mode():
    model = ConvBnReLU()
    with pytest.raises(ValueError, match=r"expected eval mode, got \['conv', 'bn', 'relu'\] in training mode"):
        Q.fuse_modules(model, ["conv", "bn", "relu"])
    model.bn.eval()
    with pytest.raises(ValueError, match=r"same mode .* conv: train, bn: eval"):
        Q.fuse_modules_qat(model, ["conv", "bn"])


def test_linear_batch_norm_is_fused_for_inference_only():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    with pytest.raises(ValueError, match=r"\(Linear, BatchNorm1d\) \(fuse_modules \(eval mode\) fuses"):
        Q.fuse_modules_qat(model, ["0", "1"])


def test_groups_are_checked_before_any_is_fused():
    model = ConvBnReLU().eval()
    with pytest.raises(AttributeError, match="nothing"):
        Q.fuse_modules(model, [["conv", "bn"], ["nothing", "relu"]], inplace=True)
    assert type(model.conv) is nn.Conv2d and type(model.bn) is nn.BatchNorm2d


def test_fused_modules_check_their_parts():
    with pytest.raises(TypeError, match=r"ConvBn2d expected modules \(Conv2d, BatchNorm2d\), got \(Conv2d, ReLU\)"):
        intrinsic.ConvBn2d(nn.Conv2d(1, 1, 1), nn.ReLU())
