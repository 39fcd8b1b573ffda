"""``fuse_modules`` and ``fuse_modules_qat``: fuse modules named by their dotted paths, as
PyTorch's ``torch.ao.quantization.fuse_modules`` / ``fuse_modules_qat``.

``prepare_qat`` fuses ``Conv2d`` + ``BatchNorm2d`` (+ activation) only where they follow each
other in an ``nn.Sequential``; a model that calls them as attributes (ResNet's ``BasicBlock``:
``self.bn1(self.conv1(x))``) names them instead. In each group the first module is replaced
by the fused one and the others by an ``Identity`` that holds their place:

- ``fuse_modules`` (eval mode): BatchNorm is folded into the convolution's (or linear
  layer's) weight and bias, as ``torch.nn.utils.fusion.fuse_conv_bn_eval`` does; a ReLU
  after it makes a ``ConvReLU2d``;
- ``fuse_modules_qat`` (training): the fused float modules of ``flowserve.nn.intrinsic``
  (``ConvBn2d``, ``ConvBnReLU2d``...), which ``prepare_qat`` turns into its quantization-aware
  modules (BatchNorm folded into the fake-quantized weight).

A module the model calls more than once cannot be fused: its place holds an ``Identity``
for every call. ResNet's ``BasicBlock`` calls one ``self.relu`` after ``bn1`` and after the
residual sum; fusing ``["conv1", "bn1", "relu"]`` would drop the second ReLU. PyTorch does so
silently; here the place of each fused-away module checks that it is called on the fused
module's output and raises where it is not (fuse ``["conv1", "bn1"]`` there instead).

>>> import flowserve as flow
>>> from flowserve.ao.quantization import fuse_modules_qat
>>> block = flow.models.resnet18().layer1[0]
>>> fused = fuse_modules_qat(block, [["conv1", "bn1"], ["conv2", "bn2"]])
>>> type(fused.conv1).__name__, type(fused.bn1).__name__
('ConvBn2d', 'FusedAway')
"""

from __future__ import annotations

import collections
import copy
import weakref
from types import MappingProxyType
from typing import Callable, NamedTuple

from flowserve.autograd.grad_mode import no_grad
from flowserve.nn import intrinsic
from flowserve.nn.module import Module
from flowserve.nn.modules.activation import ReLU
from flowserve.nn.modules.conv import Conv2d
from flowserve.nn.modules.linear import Identity, Linear
from flowserve.nn.modules.normalization import BatchNorm1d, BatchNorm2d, _BatchNorm
from flowserve.nn.parameter import Parameter
from flowserve.ops import creation
from flowserve.ops import functional as F
from flowserve.tensor import Tensor


def fuse_conv_bn_eval(conv: Conv2d, bn: BatchNorm2d) -> Conv2d:
    """A copy of ``conv`` computing ``bn(conv(x))`` with ``bn``'s running statistics
    (``torch.nn.utils.fusion.fuse_conv_bn_eval``)."""
    return _folded_copy(conv, bn)


def fuse_linear_bn_eval(linear: Linear, bn: BatchNorm1d) -> Linear:
    """A copy of ``linear`` computing ``bn(linear(x))`` with ``bn``'s running statistics
    (``torch.nn.utils.fusion.fuse_linear_bn_eval``)."""
    return _folded_copy(linear, bn)


def _folded_copy(layer, bn: _BatchNorm):
    """A copy of ``layer`` with weight ``w * gamma / sqrt(var + eps)`` (per output channel)
    and bias ``(b - mean) * gamma / sqrt(var + eps) + beta``, computed as PyTorch does."""
    layer_name, bn_name, weight = type(layer).__name__, type(bn).__name__, layer.weight
    if bn.training or bn.running_mean is None:
        raise ValueError(f"folding {bn_name} into a {layer_name} expected it in eval mode with running "
                         f"statistics, got training={bn.training}, track_running_stats={bn.track_running_stats}")
    if bn.num_features != weight.shape[0]:
        raise ValueError(f"folding {bn_name} into a {layer_name} expected {weight.shape[0]} features (its "
                         f"output channels), got {bn.num_features}")
    with no_grad():
        mean = bn.running_mean
        gamma = creation.ones_like(mean) if bn.weight is None else bn.weight
        beta = creation.zeros_like(mean) if bn.bias is None else bn.bias
        rsqrt = F.rsqrt(bn.running_var + bn.eps)
        folded_weight = weight * F.reshape(gamma * rsqrt, [-1] + [1] * (weight.ndim - 1))
        bias = creation.zeros_like(mean) if layer.bias is None else layer.bias
        folded_bias = (bias - mean) * rsqrt * gamma + beta
    folded = copy.deepcopy(layer)
    folded.weight = Parameter(folded_weight.detach(), requires_grad=weight.requires_grad)
    folded.bias = Parameter(folded_bias.detach(), requires_grad=weight.requires_grad)
    return folded


class Fusion(NamedTuple):
    """How one sequence of module types is fused: ``build(*modules)`` makes the fused module;
    ``folds`` is True where BatchNorm's running statistics are folded into a weight."""

    build: Callable
    folds: bool = False


EVAL_FUSIONS = MappingProxyType({  # PyTorch's default fuser mapping, is_qat=False
    (Conv2d, BatchNorm2d): Fusion(fuse_conv_bn_eval, folds=True),
    (Conv2d, BatchNorm2d, ReLU): Fusion(lambda conv, bn, relu: intrinsic.ConvReLU2d(fuse_conv_bn_eval(conv, bn),
                                                                                     relu), folds=True),
    (Conv2d, ReLU): Fusion(intrinsic.ConvReLU2d),
    (Linear, BatchNorm1d): Fusion(fuse_linear_bn_eval, folds=True),
    (Linear, ReLU): Fusion(intrinsic.LinearReLU),
    (BatchNorm2d, ReLU): Fusion(intrinsic.BNReLU2d),
})

QAT_FUSIONS = MappingProxyType({  # is_qat=True: the fused float modules prepare_qat trains
    (Conv2d, BatchNorm2d): Fusion(intrinsic.ConvBn2d),
    (Conv2d, BatchNorm2d, ReLU): Fusion(intrinsic.ConvBnReLU2d),
    (Conv2d, ReLU): Fusion(intrinsic.ConvReLU2d),
    (Linear, ReLU): Fusion(intrinsic.LinearReLU),
    (BatchNorm2d, ReLU): Fusion(intrinsic.BNReLU2d),
})


class FusedOutput:
    """The latest output of one fused module, which the places of the modules fused into it
    expect as their input."""

    def __init__(self, fused_name: str):
        self.fused_name = fused_name
        self._ref = None

    def record(self, module, args, out) -> None:
        """Forward hook of the fused module."""
        self._ref = weakref.ref(out) if isinstance(out, Tensor) else None

    def produced(self, x) -> bool:
        return self._ref is not None and self._ref() is x

    def __deepcopy__(self, memo) -> "FusedOutput":
        return FusedOutput(self.fused_name)


class FusedAway(Identity):
    """The place of a module fused into the module before it: passes the fused module's
    output through, and refuses any other input (the model calls the module elsewhere too)."""

    def __init__(self, name: str, fused_output: FusedOutput):
        super().__init__()
        self.fused_name = name
        self.fused_output = fused_output

    def forward(self, x):
        if not self.fused_output.produced(x):
            into = self.fused_output.fused_name
            raise ValueError(
                f"{self.fused_name} was fused into {into} and its place expected {into}'s output, got another "
                f"tensor: the model calls {self.fused_name} elsewhere too (a module called more than once, as "
                f"ResNet's BasicBlock calls its relu after bn1 and after the residual sum); fuse without "
                f"{self.fused_name}, or give each call its own module")
        return x

    def extra_repr(self) -> str:
        return f"fused into {self.fused_output.fused_name}"


def fuse_modules(model: Module, modules_to_fuse, inplace: bool = False) -> Module:
    """``model`` (a copy unless ``inplace``) with each group of ``modules_to_fuse`` (dotted
    names: ``["conv1", "bn1", "relu"]`` or a list of such lists) fused for inference:
    BatchNorm folded into the layer before it. Its BatchNorms must be in eval mode."""
    return _fuse_groups(model, modules_to_fuse, inplace, EVAL_FUSIONS, "fuse_modules")


def fuse_modules_qat(model: Module, modules_to_fuse, inplace: bool = False) -> Module:
    """``model`` (a copy unless ``inplace``) with each group of ``modules_to_fuse`` replaced by
    a fused float module of ``flowserve.nn.intrinsic``, for ``prepare_qat``."""
    return _fuse_groups(model, modules_to_fuse, inplace, QAT_FUSIONS, "fuse_modules_qat")


def _fuse_groups(model: Module, modules_to_fuse, inplace: bool, fusions, caller: str) -> Module:
    if not isinstance(model, Module):
        raise TypeError(f"{caller} expected an nn.Module, got {type(model).__name__}")
    groups = _groups(modules_to_fuse, caller)
    plans = [_plan(model, names, fusions, caller) for names in groups]  # every group checked first
    model = model if inplace else copy.deepcopy(model)
    for names, fusion in zip(groups, plans):
        _fuse(model, names, fusion)
    return model


def _groups(modules_to_fuse, caller: str) -> list:
    """``modules_to_fuse`` as a list of lists of names."""
    if isinstance(modules_to_fuse, (list, tuple)) and modules_to_fuse:
        if all(isinstance(n, str) for n in modules_to_fuse):
            return _named_once([list(modules_to_fuse)], caller)
        if all(isinstance(g, (list, tuple)) and g and all(isinstance(n, str) for n in g) for g in modules_to_fuse):
            return _named_once([list(g) for g in modules_to_fuse], caller)
    raise TypeError(f"{caller} expected modules_to_fuse as a list of module names (e.g. ['conv1', 'bn1']) or a "
                    f"list of such lists, got {modules_to_fuse!r}")


def _named_once(groups: list, caller: str) -> list:
    twice = sorted(n for n, count in collections.Counter(n for g in groups for n in g).items() if count > 1)
    if twice:
        raise ValueError(f"{caller} expected each module named once in modules_to_fuse, got {twice} more than once")
    return groups


def _submodule(model: Module, name: str, caller: str) -> Module:
    try:
        module = model.get_submodule(name) if name else None
    except AttributeError as e:
        raise AttributeError(f"{caller} expected names of submodules of {type(model).__name__}, got {name!r}: "
                             f"{e}") from None
    if not isinstance(module, Module):
        raise AttributeError(f"{caller} expected names of submodules of {type(model).__name__}, got {name!r}")
    return module


def _plan(model: Module, names: list, fusions, caller: str) -> Fusion:
    """The fusion of the modules ``names``, after checking their types and modes."""
    modules = [_submodule(model, n, caller) for n in names]
    types = tuple(type(m) for m in modules)
    fusion = fusions.get(types)
    if fusion is None:
        known = "; ".join(f"({', '.join(t.__name__ for t in seq)})" for seq in fusions)
        other, other_name = ((QAT_FUSIONS, "fuse_modules_qat") if fusions is EVAL_FUSIONS
                             else (EVAL_FUSIONS, "fuse_modules (eval mode)"))
        hint = f" ({other_name} fuses that sequence)" if types in other else ""
        raise ValueError(f"{caller} expected one of the sequences {known}; got {names} of types "
                         f"({', '.join(t.__name__ for t in types)}){hint}")
    if fusion.folds and any(m.training for m in modules):
        trained = [n for n, m in zip(names, modules) if m.training]
        raise ValueError(f"{caller} folds BatchNorm with its running statistics and expected eval mode, got "
                         f"{trained} in training mode: call model.eval() first, or fuse_modules_qat for "
                         "quantization-aware training")
    if any(isinstance(m, _BatchNorm) for m in modules) and len({m.training for m in modules}) > 1:
        modes = ", ".join(f"{n}: {'train' if m.training else 'eval'}" for n, m in zip(names, modules))
        raise ValueError(f"{caller} expected the modules of one group in the same mode (train or eval), got {modes}")
    return fusion


def _fuse(model: Module, names: list, fusion: Fusion) -> None:
    """Replace the first of ``names`` by the fused module and the others by their places,
    moving the first module's pre-hooks and the last one's hooks to the fused module."""
    modules = [_submodule(model, n, "") for n in names]
    fused = fusion.build(*modules)
    fused.training = modules[0].training
    fused._forward_pre_hooks.update(modules[0]._forward_pre_hooks)
    fused._forward_hooks.update(modules[-1]._forward_hooks)
    output = FusedOutput(names[0])
    fused.register_forward_hook(output.record)
    _replace(model, names[0], fused)
    for name in names[1:]:
        place = FusedAway(name, output)
        place.training = modules[0].training
        _replace(model, name, place)


def _replace(model: Module, name: str, module: Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent_name), attr, module)
