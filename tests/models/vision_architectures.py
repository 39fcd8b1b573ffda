"""Small re-implementations of torchvision's classification families, written from the
papers' architectures against the PyTorch API and instantiated on ``flowserve`` or ``torch``
(the twin), as ``architectures.py`` does:

- ResNet-50 (He et al.): bottleneck blocks (1x1 reduce, 3x3 at the block's stride, 1x1
  expand by 4), projection shortcuts, 7x7 stem and max pool;
- MobileNetV3 (Howard et al.): inverted residuals with hardswish or ReLU, squeeze-excitation
  gated by hardsigmoid, a hardswish classifier;
- ShuffleNetV2 (Ma et al.): channel split, depthwise branches, channel shuffle by
  ``view``/``transpose``/``contiguous``;
- RegNet X and Y (Radosavovic et al.): residual bottlenecks with group convolutions of a
  fixed group width, squeeze-excitation in Y;
- Swin (Liu et al.): patch embedding, window attention with a learned relative position
  bias, shifted windows with ``roll`` and their attention mask, patch merging.

Widths, depths and resolutions are small so that each model trains and deploys in seconds.
"""

from __future__ import annotations

import types


def vision_architectures(lib) -> types.SimpleNamespace:
    nn = lib.nn

    def divisible(v: float, divisor: int = 8) -> int:
        rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
        return rounded + divisor if rounded < 0.9 * v else rounded

    def conv_bn(cin, cout, k, stride=1, groups=1, act=None):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*(layers + [act()] if act is not None else layers))

    # -- ResNet-50 ---------------------------------------------------------------------------

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * self.expansion)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.relu(self.bn3(self.conv3(out)) + identity)

    class ResNet(nn.Module):
        def __init__(self, layers=(3, 4, 6, 3), width=8, classes=5, zero_init_residual=False):
            super().__init__()
            self.inplanes = width
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1, self.relu = nn.BatchNorm2d(width), nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = self._make_layer(width, layers[0])
            self.layer2 = self._make_layer(width * 2, layers[1], 2)
            self.layer3 = self._make_layer(width * 4, layers[2], 2)
            self.layer4 = self._make_layer(width * 8, layers[3], 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(width * 8 * Bottleneck.expansion, classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif zero_init_residual and isinstance(m, Bottleneck):
                    nn.init.zeros_(m.bn3.weight)  # each residual branch starts at zero

        def _make_layer(self, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
                downsample = conv_bn(self.inplanes, planes * Bottleneck.expansion, 1, stride)
            layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * Bottleneck.expansion
            layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(lib.flatten(self.avgpool(x), 1))

    # -- MobileNetV3 -------------------------------------------------------------------------

    class SqueezeExcitation(nn.Module):
        def __init__(self, channels, squeezed, scale_activation):
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1, self.fc2 = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)
            self.activation, self.scale_activation = nn.ReLU(), scale_activation()

        def forward(self, x):
            return x * self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))

    class MobileV3Block(nn.Module):
        def __init__(self, cin, k, expanded, cout, use_se, activation, stride):
            super().__init__()
            act = nn.Hardswish if activation == "HS" else nn.ReLU
            self.use_res_connect = stride == 1 and cin == cout
            layers = [conv_bn(cin, expanded, 1, act=act)] if expanded != cin else []
            layers.append(conv_bn(expanded, expanded, k, stride, groups=expanded, act=act))
            if use_se:
                layers.append(SqueezeExcitation(expanded, divisible(expanded // 4), nn.Hardsigmoid))
            layers.append(conv_bn(expanded, cout, 1))
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            out = self.block(x)
            return out + x if self.use_res_connect else out

    class MobileNetV3(nn.Module):
        # MobileNetV3-Small's first blocks (input, kernel, expanded, output, SE, activation, stride), narrowed
        SETTING = [(8, 3, 8, 8, True, "RE", 2), (8, 3, 24, 16, False, "RE", 2), (16, 3, 32, 16, False, "RE", 1),
                   (16, 5, 48, 24, True, "HS", 2), (24, 5, 64, 24, True, "HS", 1)]

        def __init__(self, classes=5, last_channel=64, dropout=0.0):
            super().__init__()
            layers = [conv_bn(3, 8, 3, 2, act=nn.Hardswish)]
            layers += [MobileV3Block(*setting) for setting in self.SETTING]
            layers.append(conv_bn(24, 6 * 24, 1, act=nn.Hardswish))
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Linear(6 * 24, last_channel), nn.Hardswish(inplace=True),
                                            nn.Dropout(p=dropout, inplace=True), nn.Linear(last_channel, classes))

        def forward(self, x):
            return self.classifier(lib.flatten(self.avgpool(self.features(x)), 1))

    # -- ShuffleNetV2 ------------------------------------------------------------------------

    def channel_shuffle(x, groups: int):
        batch, channels, height, width = x.size()
        x = x.view(batch, groups, channels // groups, height, width)
        return lib.transpose(x, 1, 2).contiguous().view(batch, -1, height, width)

    class ShuffleBlock(nn.Module):
        def __init__(self, inp, oup, stride):
            super().__init__()
            self.stride = stride
            branch = oup // 2
            if stride > 1:
                self.branch1 = nn.Sequential(conv_bn(inp, inp, 3, stride, groups=inp),
                                             conv_bn(inp, branch, 1, act=lambda: nn.ReLU(inplace=True)))
            else:
                self.branch1 = nn.Sequential()
            self.branch2 = nn.Sequential(conv_bn(inp if stride > 1 else branch, branch, 1, act=nn.ReLU),
                                         conv_bn(branch, branch, 3, stride, groups=branch),
                                         conv_bn(branch, branch, 1, act=nn.ReLU))

        def forward(self, x):
            if self.stride == 1:
                x1, x2 = x.chunk(2, dim=1)
                out = lib.cat((x1, self.branch2(x2)), dim=1)
            else:
                out = lib.cat((self.branch1(x), self.branch2(x)), dim=1)
            return channel_shuffle(out, 2)

    class ShuffleNetV2(nn.Module):
        def __init__(self, repeats=(2, 2, 2), channels=(8, 16, 32, 64, 96), classes=5):
            super().__init__()
            self.conv1 = conv_bn(3, channels[0], 3, 2, act=nn.ReLU)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            cin = channels[0]
            for i, (n, cout) in enumerate(zip(repeats, channels[1:-1])):
                blocks = [ShuffleBlock(cin, cout, 2)] + [ShuffleBlock(cout, cout, 1) for _ in range(n - 1)]
                setattr(self, f"stage{i + 2}", nn.Sequential(*blocks))
                cin = cout
            self.conv5 = conv_bn(cin, channels[-1], 1, act=nn.ReLU)
            self.fc = nn.Linear(channels[-1], classes)

        def forward(self, x):
            x = self.stage4(self.stage3(self.stage2(self.maxpool(self.conv1(x)))))
            return self.fc(self.conv5(x).mean([2, 3]))

    # -- RegNet ------------------------------------------------------------------------------

    class RegNetBlock(nn.Module):
        """ResBottleneckBlock: 1x1, 3x3 group conv (group width ``group_width``), SE (Y), 1x1."""

        def __init__(self, w_in, w_out, stride, group_width, bottleneck=1.0, se_ratio=None):
            super().__init__()
            self.proj = conv_bn(w_in, w_out, 1, stride) if w_in != w_out or stride != 1 else None
            w_b = int(round(w_out * bottleneck))
            layers = {"a": conv_bn(w_in, w_b, 1, act=nn.ReLU),
                      "b": conv_bn(w_b, w_b, 3, stride, groups=w_b // group_width, act=nn.ReLU)}
            if se_ratio:
                layers["se"] = SqueezeExcitation(w_b, int(round(se_ratio * w_in)), nn.Sigmoid)
            layers["c"] = conv_bn(w_b, w_out, 1)
            self.f = nn.Sequential(*layers.values())
            self.activation = nn.ReLU(inplace=True)

        def forward(self, x):
            shortcut = x if self.proj is None else self.proj(x)
            return self.activation(shortcut + self.f(x))

    class RegNet(nn.Module):
        def __init__(self, widths=(16, 32), depths=(1, 2), group_width=8, se_ratio=None, classes=5):
            super().__init__()
            self.stem = conv_bn(3, 16, 3, 2, act=nn.ReLU)
            stages, w_in = [], 16
            for w_out, depth in zip(widths, depths):
                stages.append(nn.Sequential(*[RegNetBlock(w_in if i == 0 else w_out, w_out, 2 if i == 0 else 1,
                                                          group_width, se_ratio=se_ratio) for i in range(depth)]))
                w_in = w_out
            self.trunk_output = nn.Sequential(*stages)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(w_in, classes)

        def forward(self, x):
            return self.fc(self.avgpool(self.trunk_output(self.stem(x))).flatten(start_dim=1))

    # -- Swin --------------------------------------------------------------------------------

    def relative_position_index(window: int):
        """(window**2 * window**2,) index into the (2w-1)**2 bias table for each query/key pair."""
        rows = lib.arange(window).view(window, 1).expand(window, window).flatten()
        cols = lib.arange(window).view(1, window).expand(window, window).flatten()
        dr = rows[:, None] - rows[None, :] + window - 1
        dc = cols[:, None] - cols[None, :] + window - 1
        return (dr * (2 * window - 1) + dc).flatten()

    def shift_mask(height, width, window, shift, like):
        """-100 where a query and a key of the same shifted window came from different regions."""
        mask = like.new_zeros((height, width))
        spans = ((0, -window), (-window, -shift), (-shift, None))
        count = 0
        for h in spans:
            for w in spans:
                mask[h[0]:h[1], w[0]:w[1]] = count
                count += 1
        mask = mask.view(height // window, window, width // window, window).permute(0, 2, 1, 3)
        mask = mask.reshape(-1, window * window)
        mask = mask.unsqueeze(1) - mask.unsqueeze(2)
        return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)

    class ShiftedWindowAttention(nn.Module):
        def __init__(self, dim, window, shift, heads):
            super().__init__()
            self.window, self.shift, self.heads = window, shift, heads
            self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)
            self.relative_position_bias_table = nn.Parameter(lib.zeros((2 * window - 1) ** 2, heads))
            nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
            self.register_buffer("relative_position_index", relative_position_index(window))

        def _bias(self):
            n = self.window * self.window
            bias = self.relative_position_bias_table[self.relative_position_index]
            return bias.view(n, n, -1).permute(2, 0, 1).contiguous().unsqueeze(0)

        def forward(self, x):
            b, h, w, c = x.shape
            win, heads = self.window, self.heads
            shift = self.shift if win < h else 0  # a window covering the map has nothing to shift
            if shift:
                x = lib.roll(x, shifts=(-shift, -shift), dims=(1, 2))
            windows = (h // win) * (w // win)
            x = x.view(b, h // win, win, w // win, win, c).permute(0, 1, 3, 2, 4, 5).reshape(b * windows, win * win, c)
            qkv = self.qkv(x).reshape(x.size(0), x.size(1), 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = (q * (c // heads) ** -0.5).matmul(k.transpose(-2, -1)) + self._bias()
            if shift:
                n = win * win
                attn = attn.view(b, windows, heads, n, n) + shift_mask(h, w, win, shift, x).unsqueeze(1).unsqueeze(0)
                attn = attn.view(-1, heads, n, n)
            x = attn.softmax(dim=-1).matmul(v).transpose(1, 2).reshape(x.size(0), x.size(1), c)
            x = self.proj(x).view(b, h // win, w // win, win, win, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
            return lib.roll(x, shifts=(shift, shift), dims=(1, 2)) if shift else x

    class SwinBlock(nn.Module):
        def __init__(self, dim, heads, window, shift, mlp_ratio=2.0):
            super().__init__()
            self.norm1, self.attn = nn.LayerNorm(dim), ShiftedWindowAttention(dim, window, shift, heads)
            self.norm2 = nn.LayerNorm(dim)
            hidden = int(dim * mlp_ratio)
            self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class PatchMerging(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

        def forward(self, x):
            x0, x1 = x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :]
            x2, x3 = x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :]
            return self.reduction(self.norm(lib.cat([x0, x1, x2, x3], -1)))

    class Swin(nn.Module):
        def __init__(self, patch=2, dim=16, depths=(2, 2), heads=(2, 4), window=4, classes=5):
            super().__init__()
            self.patch_embed = nn.Conv2d(3, dim, patch, patch)
            self.embed_norm = nn.LayerNorm(dim)
            stages = []
            for i, (depth, n_heads) in enumerate(zip(depths, heads)):
                if i:
                    stages.append(PatchMerging(dim))
                    dim *= 2
                stages += [SwinBlock(dim, n_heads, window, 0 if j % 2 == 0 else window // 2) for j in range(depth)]
            self.features = nn.Sequential(*stages)
            self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)

        def forward(self, x):
            x = self.embed_norm(self.patch_embed(x).permute(0, 2, 3, 1))
            x = self.norm(self.features(x)).permute(0, 3, 1, 2)
            return self.head(lib.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return types.SimpleNamespace(ResNet=ResNet, MobileNetV3=MobileNetV3, ShuffleNetV2=ShuffleNetV2, RegNet=RegNet,
                                 Swin=Swin)
