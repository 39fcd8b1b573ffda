"""``prepare_qat``'s per-module ``qconfig`` against PyTorch's (``torch.ao.quantization.
prepare_qat``, which reads it through ``propagate_qconfig_``): the same layers are quantized,
the same left in float32."""

from __future__ import annotations

import pytest

import flowserve.nn as nn
from flowserve.ao import quantization as Q
from flowserve.nn.qat.prepare import QAT_MODULES
from tests.ao.qat_models import TinyNet
from tests.ao.test_fuse_modules import _torch_qconfig

torch = pytest.importorskip("torch")
from torch.ao import quantization as TQ  # noqa: E402
from torch.ao.nn import qat as torch_qat  # noqa: E402


class TorchResidual(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = torch.nn.Sequential(
            torch.nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False),
            torch.nn.BatchNorm2d(channels), torch.nn.ReLU6(), torch.nn.Conv2d(channels, channels, 1, bias=False),
            torch.nn.BatchNorm2d(channels))


class TorchTinyNet(torch.nn.Module):
    """``TinyNet``'s layers in PyTorch, under the same names (``stem.0``, ``block.conv.3``, ``head``)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
                                        torch.nn.BatchNorm2d(8), torch.nn.ReLU6())
        self.block = TorchResidual(8)
        self.head = torch.nn.Linear(8, 5)


def _layers(model, quantized_types, float_types) -> dict:
    """Conv/linear layer name -> "int8" (prepared for QAT) or "float"; not the float layers a
    QAT module holds (a fused ``ConvBn2d``'s ``conv``)."""
    kinds = {}
    for name, module in model.named_modules():
        if isinstance(module, quantized_types):
            kinds[name] = "int8"
        elif type(module) in float_types and not any(name.startswith(f"{q}.") for q in kinds):
            kinds[name] = "float"
    return kinds


@pytest.mark.parametrize("settings", [
    {"stem": None, "head": None},
    {"stem.0": None, "block.conv.0": None},
    {"block": None, "block.conv.3": "qconfig"},
    {"": None, "block": "qconfig"},
    {},
], ids=["stem-and-head-float", "single-convs-float", "child-quantized-in-float-block", "only-block-quantized",
        "none-float"])
def test_the_layers_left_float_are_pytorchs(settings):
    ours, theirs = TinyNet(), TorchTinyNet().train()
    theirs.qconfig = _torch_qconfig()
    for name, setting in settings.items():
        ours.get_submodule(name).qconfig = None if setting is None else Q.default_qconfig()
        theirs.get_submodule(name).qconfig = None if setting is None else _torch_qconfig()
    got = _layers(Q.prepare_qat(ours), QAT_MODULES, (nn.Conv2d, nn.Linear))
    want = _layers(TQ.prepare_qat(theirs), (torch_qat.Conv2d, torch_qat.Linear), (torch.nn.Conv2d, torch.nn.Linear))
    assert got == want
    assert sorted(got) == ["block.conv.0", "block.conv.3", "head", "stem.0"]
