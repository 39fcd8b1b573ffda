"""``flowserve.models``: reference models built only from the public ``flowserve.nn`` API.

Attribute names follow torchvision, so ``state_dict`` keys equal PyTorch's and weights can
be copied either way.

>>> import flowserve as flow
>>> model = flow.models.mobilenet_v2(num_classes=10)
>>> model(flow.randn(2, 3, 32, 32)).shape
flowserve.Size([2, 10])
"""

from flowserve.models.mlp import MLP, mlp  # noqa: F401
from flowserve.models.mobilenet import ConvBNActivation, InvertedResidual, MobileNetV2, mobilenet_v2  # noqa: F401
from flowserve.models.resnet import BasicBlock, ResNet, resnet18  # noqa: F401
from flowserve.models.transformer import TransformerClassifier, transformer_classifier  # noqa: F401

__all__ = ["MLP", "mlp", "MobileNetV2", "mobilenet_v2", "ConvBNActivation", "InvertedResidual", "ResNet",
           "BasicBlock", "resnet18", "TransformerClassifier", "transformer_classifier"]
