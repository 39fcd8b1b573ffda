"""MobileNetV2 (Sandler et al., 2018) structured as torchvision's/flowvision's, so that its
``state_dict`` keys (``features.0.0.weight``, ``features.1.conv.0.0.weight``, ...,
``classifier.1.weight``) equal PyTorch's."""

from __future__ import annotations

from flowserve import nn

_SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
            [6, 320, 1, 1]]  # expansion t, channels c, repeats n, first stride s


def _make_divisible(v: float, divisor: int, min_value=None) -> int:
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvBNActivation(nn.Sequential):
    """Conv2d (no bias) -> BatchNorm2d -> ReLU6, padded to keep the size at stride 1."""

    def __init__(self, in_planes: int, out_planes: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        padding = (kernel_size - 1) // 2
        super().__init__(nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
                         nn.BatchNorm2d(out_planes), nn.ReLU6(inplace=True))
        self.out_channels = out_planes


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise (3x3) -> project (1x1, linear), with a residual at stride 1."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"InvertedResidual expected stride 1 or 2, got {stride}")
        self.stride = stride
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [ConvBNActivation(inp, hidden_dim, kernel_size=1)] if expand_ratio != 1 else []
        layers += [ConvBNActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
                   nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, round_nearest: int = 8,
                 dropout: float = 0.2):
        super().__init__()
        input_channel = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features = [ConvBNActivation(3, input_channel, stride=2)]
        for t, c, n, s in _SETTING:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t))
                input_channel = output_channel
        features.append(ConvBNActivation(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.last_channel, num_classes))
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(nn.functional.flatten(x, 1))


def mobilenet_v2(num_classes: int = 1000, width_mult: float = 1.0, round_nearest: int = 8,
                 dropout: float = 0.2) -> MobileNetV2:
    """MobileNetV2 as torchvision's ``mobilenet_v2`` (``num_classes=10`` for CIFAR-10).

    >>> import flowserve as flow
    >>> model = flow.models.mobilenet_v2(num_classes=10)
    >>> model.last_channel, model(flow.randn(1, 3, 32, 32)).shape
    (1280, flowserve.Size([1, 10]))
    """
    return MobileNetV2(num_classes, width_mult, round_nearest, dropout)
