"""``prepare_qat``, ``convert`` and the observer / BatchNorm switches.

``prepare_qat(model, qconfig)`` puts fake-quantization exactly where ``flowserve export
--precision int8`` quantizes (``exporter/precision.py``: ONNX Runtime's QDQ placement):

- every ``Conv2d`` and ``Linear``: its weight per output channel (int8, 7 bits), its input
  (uint8, unless the tensor is already the output of a fake-quantizer) and its output;
- ``Conv2d`` + ``BatchNorm2d`` (+ ``ReLU``/``ReLU6``) following each other in an
  ``nn.Sequential`` become one ``ConvBn2d`` (the exporter folds BatchNorm into the weight and
  absorbs the activation: the output is quantized after it), ``Conv2d``/``Linear`` + ``ReLU``/
  ``ReLU6`` one ``Conv2d``/``Linear`` quantized after the activation; the BatchNorm and
  activation places hold ``Identity``. The fused modules of ``fuse_modules_qat``
  (``flowserve.nn.intrinsic``: ``ConvBn2d``, ``ConvBnReLU2d``, ``ConvReLU2d``, ``LinearReLU``)
  are such ``nn.Sequential``s: they are how a model that calls its layers as attributes
  (ResNet's ``BasicBlock``) names what to fuse;
- the output of every other module with submodules (not an ``nn.Sequential``, whose output
  is its last module's) where it is not quantized yet: the sum of a residual block.

A module's own ``qconfig`` attribute overrides the one it inherits, for it and the modules
inside it (PyTorch's ``propagate_qconfig_``): ``model.classifier.qconfig = None`` leaves the
classifier in float32 (its input is then quantized by the layer after it, if any), as
PyTorch users keep a network's first convolution and last linear layer in float.

>>> import flowserve as flow
>>> from flowserve.ao.quantization import prepare_qat
>>> model = prepare_qat(flow.nn.Sequential(flow.nn.Conv2d(3, 4, 3), flow.nn.BatchNorm2d(4), flow.nn.ReLU()))
>>> [type(m).__name__ for m in model]
['ConvBn2d', 'Identity', 'Identity']
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Optional

from flowserve.nn.qat import modules as qat
from flowserve.nn.qat.fake_quantize import FakeQuantize, QConfig, default_qconfig
from flowserve.nn.module import Module
from flowserve.nn.parameter import Parameter
from flowserve.nn.modules.activation import ReLU, ReLU6
from flowserve.nn.modules.container import Sequential
from flowserve.nn.modules.conv import Conv2d
from flowserve.nn.modules.linear import Identity, Linear
from flowserve.nn.modules.normalization import BatchNorm2d
from flowserve.tensor import Tensor

QAT_MODULES = (qat.Conv2d, qat.ConvBn2d, qat.Linear)
FUSED_ACTIVATIONS = (ReLU, ReLU6)  # absorbed by the layer before them: quantized after


def prepare_qat(model: Module, qconfig: Optional[QConfig] = None, inplace: bool = False) -> Module:
    """``model`` (a copy unless ``inplace``) with fake-quantization inserted for training;
    ``qconfig`` defaults to ``default_qconfig()``. Preparing a prepared model changes nothing."""
    if not isinstance(model, Module):
        raise TypeError(f"prepare_qat expected an nn.Module, got {type(model).__name__}")
    if is_prepared(model):
        return model
    if type(model) in (Conv2d, Linear):
        raise ValueError(f"prepare_qat replaces layers inside a model, got a bare {type(model).__name__}: "
                         "wrap it, e.g. nn.Sequential(layer)")
    model = model if inplace else copy.deepcopy(model)
    _prepare(model, _own_qconfig(model, qconfig or default_qconfig()), qat.QuantizedTensors())
    return model


def _own_qconfig(module: Module, inherited: Optional[QConfig]) -> Optional[QConfig]:
    """The module's ``qconfig`` attribute where it has one (None: left in float), else the
    inherited one."""
    if "qconfig" not in module.__dict__:
        return inherited
    own = module.__dict__["qconfig"]
    if own is not None and not isinstance(own, QConfig):
        raise TypeError(f"prepare_qat expected {type(module).__name__}.qconfig to be a QConfig or None, "
                        f"got {type(own).__name__}")
    return own


def qconfig_from_graph_options(options: dict) -> QConfig:
    """The ``QConfig`` of ``graph.config.set_qat_config``'s settings (defaults without them)."""
    settings = options.get("qat_config", {})
    base = default_qconfig(settings.get("moving_min_max_stop_update_after_iters"), settings.get("freeze_bn_after"))
    activation = replace(base.activation, averaging_constant=1.0 - settings.get("moving_min_max_momentum", 0.99))
    weight = base.weight if settings.get("per_channel_weight_quantization", True) else \
        replace(base.weight, per_channel=False)
    return replace(base, activation=activation, weight=weight)


def prepare_graph(graph) -> None:
    """``graph.config.enable_qat(True)``: prepare the graph's modules in place, once."""
    qconfig = qconfig_from_graph_options(graph.config.options)
    for module in graph.original_modules().values():
        prepare_qat(module, qconfig, inplace=True)


def is_prepared(model: Module) -> bool:
    return any(isinstance(m, QAT_MODULES) for m in model.modules())


def _prepare(module: Module, qconfig: Optional[QConfig], tracker: qat.QuantizedTensors) -> None:
    """Prepare ``module``'s children in place; ``qconfig`` is ``module``'s own (None: float)."""
    if isinstance(module, Sequential) and qconfig is not None:
        _fuse_sequential(module, qconfig, tracker)
    for name, child in list(module.named_children()):
        if isinstance(child, QAT_MODULES):
            continue
        child_qconfig = _own_qconfig(child, qconfig)
        if type(child) is Conv2d and child_qconfig is not None:
            _swap(module, name, child, qat.Conv2d(child, child_qconfig, tracker))
        elif type(child) is Linear and child_qconfig is not None:
            _swap(module, name, child, qat.Linear(child, child_qconfig, tracker))
        else:
            _prepare(child, child_qconfig, tracker)
        if child_qconfig is None and qconfig is not None:  # a float island: its output stays float
            child.float_output_tracker = tracker
            child.register_forward_hook(_keep_float_output)
    has_children = next(iter(module.children()), None) is not None
    if has_children and qconfig is not None and not isinstance(module, Sequential):
        module.activation_post_process = FakeQuantize(qconfig.activation,
                                                      freeze_observer_after=qconfig.freeze_observer_after)
        module.activation_post_process.tracker = tracker
        module.register_forward_hook(_quantize_output)


def _fuse_sequential(seq: Sequential, qconfig: QConfig, tracker: qat.QuantizedTensors) -> None:
    names = [name for name, _ in seq.named_children()]
    i = 0
    while i < len(names):
        i += max(1, _fuse_at(seq, names[i:i + 3], qconfig, tracker))


def _fuse_at(seq: Sequential, names: list, qconfig: QConfig, tracker: qat.QuantizedTensors) -> int:
    """Fuse the layer ``names[0]`` of ``seq`` with the BatchNorm2d (after a Conv2d) and the
    activation that follow it; how many places the fused module took (0: none)."""
    layer, after = getattr(seq, names[0]), [getattr(seq, name) for name in names[1:]]
    own = _own_qconfig(layer, qconfig)
    if own is None or type(layer) not in (Conv2d, Linear):
        return 0
    bn = after[0] if after and type(layer) is Conv2d and type(after[0]) is BatchNorm2d else None
    if bn is not None and _own_qconfig(bn, own) is None:  # a layer left in float is not fused
        return 0
    act = after[1 if bn is not None else 0] if len(after) > (bn is not None) else None
    act = act if type(act) in FUSED_ACTIVATIONS else None
    if bn is not None:
        fused = qat.ConvBn2d(layer, bn, own, tracker, act)
    elif act is None:
        return 0
    else:
        fused = (qat.Conv2d if type(layer) is Conv2d else qat.Linear)(layer, own, tracker, act)
    _swap(seq, names[0], layer, fused)
    taken = 1 + (bn is not None) + (act is not None)
    for name in names[1:taken]:
        setattr(seq, name, Identity())
    return taken


def _swap(module: Module, name: str, old: Module, new: Module) -> Module:
    """Put ``new`` in place of ``module``'s child ``old``, with ``old``'s forward hooks (as
    PyTorch's ``swap_module``): those ``fuse_modules`` registered on a fused layer."""
    new._forward_pre_hooks.update(old._forward_pre_hooks)
    new._forward_hooks.update(old._forward_hooks)
    setattr(module, name, new)
    return new


def _quantize_output(module, args, out):
    """Forward hook of a prepared container: fake-quantize its output unless a layer did, or
    a layer left in float made it."""
    fq = module.activation_post_process
    if not isinstance(out, Tensor) or not out.dtype.is_floating_point or out in fq.tracker \
            or fq.tracker.is_float(out):
        return None
    return fq.tracker.mark(fq(out))


def _keep_float_output(module, args, out):
    """Forward hook of a module left in float inside a prepared one."""
    if isinstance(out, Tensor):
        module.float_output_tracker.mark_float(out)
    return None


def fake_quantizers(model: Module):
    return [m for m in model.modules() if isinstance(m, FakeQuantize)]


def disable_observer(model: Module) -> Module:
    """Stop updating every scale and zero point (``torch.ao.quantization.disable_observer``)."""
    for fq in fake_quantizers(model):
        fq.observer_enabled = False
    return model


def enable_observer(model: Module) -> Module:
    for fq in fake_quantizers(model):
        fq.observer_enabled = True
    return model


def freeze_bn_stats(model: Module) -> Module:
    """Fused conv+BN modules normalise with the running statistics from now on, and stop
    updating them (``torch.ao.nn.intrinsic.qat.freeze_bn_stats``). A compiled ``nn.Graph``
    keeps what it traced: to freeze inside one, use ``QConfig.freeze_bn_after``."""
    for m in model.modules():
        if isinstance(m, qat.ConvBn2d):
            m.bn_frozen = True
    return model


def convert(model: Module, inplace: bool = False) -> Module:
    """The deployable model: every fused ``ConvBn2d`` becomes a ``Conv2d`` with BatchNorm
    folded into its weight and bias, observers stop, eval mode. Its fake-quantizers lower to
    QuantizeLinear/DequantizeLinear: exported, ONNX Runtime runs it with integer kernels."""
    if not is_prepared(model):
        raise ValueError("convert expected a model prepared with prepare_qat, got one with no QAT module")
    model = model if inplace else copy.deepcopy(model)
    _fold(model)
    disable_observer(model)
    return model.eval()


def _fold(module: Module) -> None:
    for name, child in list(module.named_children()):
        if not isinstance(child, qat.ConvBn2d):
            _fold(child)
            continue
        weight, bias = child.folded()
        conv = copy.deepcopy(child.conv)
        conv.weight = Parameter(weight.detach())
        conv.bias = Parameter(bias.detach())
        folded = qat.Conv2d(conv, child.qconfig, child.tracker, child.act)
        for part in ("input_fake_quant", "weight_fake_quant", "output_fake_quant"):
            setattr(folded, part, getattr(child, part))
        _swap(module, name, child, folded)
