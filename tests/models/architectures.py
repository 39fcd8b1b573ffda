"""Tiny faithful re-implementations of real architectures, written once against the
PyTorch API and instantiated twice: with ``flowserve`` and with ``torch`` (the twin).

``architectures(lib)`` returns the model classes built on ``lib`` (``flowserve`` or
``torch``), so the flowserve model and its PyTorch twin are the same code, as a ported
script is. Structures follow the originals: timm's ViT (class token expanded to the batch,
DropPath via ``new_empty(...).bernoulli_``), flowvision's ConvNeXt (channels-first
LayerNorm, layer scale, DropPath via ``rand`` + ``floor_``), torchvision's EfficientNet
(MBConv with squeeze-excitation, SiLU, StochasticDepth) and DenseNet (dense layers with
concatenation, transitions), PyTorch examples' word-language-model LSTM, and nanoGPT's
GPT (causal mask buffer, tied embeddings, ``generate`` with top-k and ``multinomial``).
"""

from __future__ import annotations

import math
import types


def architectures(lib) -> types.SimpleNamespace:
    nn, F = lib.nn, lib.nn.functional

    def drop_path(x, p: float, training: bool):
        """timm's DropPath: one Bernoulli draw per sample."""
        if p == 0.0 or not training:
            return x
        keep = 1 - p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask.div_(keep)

    class Attention(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads, self.scale = heads, (dim // heads) ** -0.5
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            b, n, c = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
            return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))

    class ViTBlock(nn.Module):
        def __init__(self, dim, heads, drop_path_rate):
            super().__init__()
            self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))
            self.drop_path = drop_path_rate

        def forward(self, x):
            x = x + drop_path(self.attn(self.norm1(x)), self.drop_path, self.training)
            return x + drop_path(self.mlp(self.norm2(x)), self.drop_path, self.training)

    class ViT(nn.Module):
        def __init__(self, image=16, patch=4, dim=16, depth=2, heads=2, classes=5, drop_path_rate=0.0):
            super().__init__()
            self.patch_embed = nn.Conv2d(3, dim, patch, patch)
            self.cls_token = nn.Parameter(lib.zeros(1, 1, dim))
            self.pos_embed = nn.Parameter(lib.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
            nn.init.trunc_normal_(self.cls_token, std=0.02)
            self.blocks = nn.Sequential(*[ViTBlock(dim, heads, drop_path_rate) for _ in range(depth)])
            self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

        def forward(self, x):
            x = self.patch_embed(x).flatten(2).transpose(1, 2)
            x = lib.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
            return self.head(self.norm(self.blocks(x))[:, 0])

    class LayerNorm2d(nn.Module):
        """flowvision's channels-first LayerNorm."""

        def __init__(self, channels, eps=1e-6):
            super().__init__()
            self.weight, self.bias = nn.Parameter(lib.ones(channels)), nn.Parameter(lib.zeros(channels))
            self.eps = eps

        def forward(self, x):
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / lib.sqrt(s + self.eps)
            return self.weight[:, None, None] * x + self.bias[:, None, None]

    def flowvision_drop_path(x, p: float, training: bool):
        if p == 0.0 or not training:
            return x
        keep = 1 - p
        mask = keep + lib.rand((x.shape[0],) + (1,) * (x.ndim - 1), dtype=x.dtype)
        mask.floor_()
        return x.div(keep) * mask

    class ConvNeXtBlock(nn.Module):
        def __init__(self, dim, drop_path_rate, layer_scale=1e-6 * 1e5):
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.pwconv1, self.act, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(layer_scale * lib.ones(dim))
            self.drop_path = drop_path_rate

        def forward(self, x):
            y = self.dwconv(x).permute(0, 2, 3, 1)
            y = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(y))))
            return x + flowvision_drop_path(y.permute(0, 3, 1, 2), self.drop_path, self.training)

    class ConvNeXt(nn.Module):
        def __init__(self, dims=(8, 16), classes=5, drop_path_rate=0.0):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0]))
            self.stage1 = ConvNeXtBlock(dims[0], drop_path_rate)
            self.down = nn.Sequential(LayerNorm2d(dims[0]), nn.Conv2d(dims[0], dims[1], 2, 2))
            self.stage2 = ConvNeXtBlock(dims[1], drop_path_rate)
            self.norm, self.head = nn.LayerNorm(dims[1], eps=1e-6), nn.Linear(dims[1], classes)

        def forward(self, x):
            x = self.stage2(self.down(self.stage1(self.stem(x))))
            return self.head(self.norm(x.mean([-2, -1])))

    class StochasticDepth(nn.Module):
        """torchvision's row-mode stochastic depth."""

        def __init__(self, p):
            super().__init__()
            self.p = p

        def forward(self, x):
            if not self.training or self.p == 0.0:
                return x
            survival = 1.0 - self.p
            noise = lib.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype).bernoulli_(survival)
            return x * noise.div_(survival)

    def conv_bn_act(cin, cout, k, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*(layers + [nn.SiLU(inplace=True)] if act else layers))

    class SqueezeExcitation(nn.Module):
        def __init__(self, channels, squeezed):
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1, self.fc2 = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)
            self.activation, self.scale_activation = nn.SiLU(), nn.Sigmoid()

        def forward(self, x):
            scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
            return x * self.scale_activation(scale)

    class MBConv(nn.Module):
        def __init__(self, cin, cout, expand, k, stride, sd_prob):
            super().__init__()
            mid = cin * expand
            self.use_res = stride == 1 and cin == cout
            layers = [conv_bn_act(cin, mid, 1)] if expand != 1 else []
            layers += [conv_bn_act(mid, mid, k, stride, groups=mid), SqueezeExcitation(mid, max(1, cin // 4)),
                       conv_bn_act(mid, cout, 1, act=False)]
            self.block = nn.Sequential(*layers)
            self.stochastic_depth = StochasticDepth(sd_prob)

        def forward(self, x):
            out = self.block(x)
            return self.stochastic_depth(out) + x if self.use_res else out

    class EfficientNet(nn.Module):
        def __init__(self, classes=5, sd_prob=0.0):
            super().__init__()
            self.features = nn.Sequential(conv_bn_act(3, 8, 3, 2), MBConv(8, 8, 1, 3, 1, sd_prob),
                                          MBConv(8, 12, 4, 3, 2, sd_prob), MBConv(12, 12, 4, 5, 1, sd_prob),
                                          conv_bn_act(12, 32, 1))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Dropout(p=0.0), nn.Linear(32, classes))

        def forward(self, x):
            return self.classifier(lib.flatten(self.avgpool(self.features(x)), 1))

    class DenseLayer(nn.Module):
        def __init__(self, cin, growth, bn_size=2):
            super().__init__()
            self.norm1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU(inplace=True)
            self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
            self.norm2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

        def forward(self, features):
            x = lib.cat(features, 1)
            return self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))

    class DenseBlock(nn.ModuleDict):
        def __init__(self, layers, cin, growth):
            super().__init__()
            for i in range(layers):
                self[f"denselayer{i + 1}"] = DenseLayer(cin + i * growth, growth)

        def forward(self, x):
            features = [x]
            for layer in self.values():
                features.append(layer(features))
            return lib.cat(features, 1)

    class DenseNet(nn.Module):
        def __init__(self, growth=4, classes=5):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                DenseBlock(2, 8, growth),
                nn.Sequential(nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.Conv2d(16, 8, 1, bias=False),
                              nn.AvgPool2d(2, 2)),
                DenseBlock(2, 8, growth), nn.BatchNorm2d(16))
            self.classifier = nn.Linear(16, classes)

        def forward(self, x):
            out = F.relu(self.features(x), inplace=True)
            return self.classifier(lib.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1))

    class RNNModel(nn.Module):
        """PyTorch examples' word_language_model (LSTM, tied weights off)."""

        def __init__(self, ntoken=17, ninp=8, nhid=8, nlayers=2, dropout=0.0):
            super().__init__()
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
            self.decoder = nn.Linear(nhid, ntoken)

        def forward(self, tokens):
            output, _ = self.rnn(self.drop(self.encoder(tokens)))
            return self.decoder(self.drop(output))

    class CausalSelfAttention(nn.Module):
        def __init__(self, n_embd, n_head, block_size, dropout):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
            self.attn_dropout, self.resid_dropout = nn.Dropout(dropout), nn.Dropout(dropout)
            self.n_head, self.n_embd = n_head, n_embd
            self.register_buffer("bias", lib.tril(lib.ones(block_size, block_size)).view(1, 1, block_size, block_size))

        def forward(self, x):
            b, t, c = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
            q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
            v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
            return self.resid_dropout(self.c_proj(y))

    class GPTBlock(nn.Module):
        def __init__(self, n_embd, n_head, block_size, dropout):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
            self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd),
                                     nn.Dropout(dropout))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, vocab_size=19, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0):
            super().__init__()
            self.block_size = block_size
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd), drop=nn.Dropout(dropout),
                h=nn.ModuleList([GPTBlock(n_embd, n_head, block_size, dropout) for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd)))
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

        def forward(self, idx):
            t = idx.size(1)
            pos = lib.arange(0, t, dtype=lib.long)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            return self.lm_head(self.transformer.ln_f(x))

        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
                logits = self(idx_cond)[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = lib.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("Inf")
                probs = F.softmax(logits, dim=-1)
                idx = lib.cat((idx, lib.multinomial(probs, num_samples=1)), dim=1)
            return idx

    return types.SimpleNamespace(ViT=ViT, ConvNeXt=ConvNeXt, EfficientNet=EfficientNet, DenseNet=DenseNet,
                                 RNNModel=RNNModel, GPT=GPT)
