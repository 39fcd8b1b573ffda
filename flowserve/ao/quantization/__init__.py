"""Quantization-aware training (PyTorch's ``torch.ao.quantization`` names): train with the
int8 rounding ``flowserve export --precision int8`` deploys, so the exported model keeps the
float model's accuracy where calibration alone does not (MobileNetV2, docs/export.md).

>>> import flowserve as flow
>>> from flowserve.ao import quantization as Q
>>> model = Q.prepare_qat(flow.models.mobilenet_v2(num_classes=10))  # then train as usual
>>> deployed = Q.convert(model)  # BatchNorm folded, observers stopped, eval mode

Layers called as attributes, not in an ``nn.Sequential`` (ResNet's ``BasicBlock``), are fused
by name first, as in PyTorch: ``fuse_modules_qat(model, [["conv1", "bn1"], ["conv2", "bn2"]])``
(``fuse_modules`` on an eval model folds BatchNorm into the convolution).

In an ``nn.Graph``: ``self.config.enable_qat(True)`` prepares the graph's modules the same way.
A module whose ``qconfig`` attribute is None (``model.classifier.qconfig = None``) stays float32.
"""

from flowserve.nn.qat.fake_quantize import (
    ACTIVATION_QUANT_RANGE,
    WEIGHT_QUANT_RANGE,
    FakeQuantize,
    FakeQuantSpec,
    QConfig,
    default_qconfig,
    quantization_params,
)
from flowserve.nn.qat.fuse import fuse_conv_bn_eval, fuse_linear_bn_eval, fuse_modules, fuse_modules_qat
from flowserve.nn.qat.prepare import (
    convert,
    disable_observer,
    enable_observer,
    fake_quantizers,
    freeze_bn_stats,
    is_prepared,
    prepare_qat,
)

__all__ = [
    "ACTIVATION_QUANT_RANGE", "WEIGHT_QUANT_RANGE", "FakeQuantize", "FakeQuantSpec", "QConfig", "convert",
    "default_qconfig", "disable_observer", "enable_observer", "fake_quantizers", "freeze_bn_stats",
    "fuse_conv_bn_eval", "fuse_linear_bn_eval", "fuse_modules", "fuse_modules_qat", "is_prepared", "prepare_qat",
    "quantization_params",
]
