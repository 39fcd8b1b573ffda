"""``nn.TransformerDecoderLayer``, ``nn.TransformerDecoder`` and ``nn.Transformer`` with
PyTorch's parameter names and formulas (post-norm, or pre-norm with ``norm_first=True``).

>>> import flowserve as flow
>>> model = flow.nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
...                             dim_feedforward=32, batch_first=True)
>>> src, tgt = flow.randn(2, 7, 16), flow.randn(2, 5, 16)
>>> mask = flow.nn.Transformer.generate_square_subsequent_mask(5)
>>> tuple(model(src, tgt, tgt_mask=mask).shape)
(2, 5, 16)
"""

from __future__ import annotations

from flowserve.nn import init
from flowserve.nn.module import Module
from flowserve.nn.modules.dropout import Dropout
from flowserve.nn.modules.linear import Linear
from flowserve.nn.modules.normalization import LayerNorm
from flowserve.nn.modules.transformer import (
    LayerStack, MultiheadAttention, TransformerEncoder, TransformerEncoderLayer, activation_of,
)
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
def square_subsequent_mask(size: int, dtype=None, device=None):
    """``(size, size)`` float mask: 0 on and below the diagonal, -inf above (PyTorch's)."""
    ones = creation.ones(size, size, dtype=dtype, device=device)
    return ops_functional.masked_fill(creation.zeros(size, size, dtype=dtype, device=device),
                          ops_functional.triu(ones, 1) > 0, float("-inf"))


def _causal(mask, is_causal: bool, length: int, like):
    if is_causal and mask is None:
        return square_subsequent_mask(length, dtype=like.dtype, device=like.device)
    return mask


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's ``memory`` and a feed-forward block."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)
        self.activation = activation_of(activation, "TransformerDecoderLayer")
        self.batch_first = batch_first

    def _sa_block(self, x, mask, padding):
        return self.dropout1(self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False)[0])

    def _mha_block(self, x, memory, mask, padding):
        out = self.multihead_attn(x, memory, memory, attn_mask=mask, key_padding_mask=padding, need_weights=False)[0]
        return self.dropout2(out)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        length = tgt.shape[1 if self.batch_first and tgt.ndim == 3 else 0]
        tgt_mask = _causal(tgt_mask, tgt_is_causal, length, tgt)
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask))
        return self.norm3(x + self._ff_block(x))


class TransformerDecoder(LayerStack):
    """``num_layers`` copies of ``decoder_layer`` and an optional final norm."""

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=tgt_is_causal)
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """The encoder-decoder Transformer (``encoder.layers.N``, ``decoder.layers.N``, final
    ``encoder.norm``/``decoder.norm``), initialised as PyTorch (xavier-uniform weights)."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", custom_encoder=None, custom_decoder=None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        layer_args = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                          layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first,
                          bias=bias, **kw)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **layer_args), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **layer_args), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None,
                tgt_is_causal=None, memory_is_causal: bool = False):
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(f"the feature number of src and tgt must be equal to d_model ({self.d_model}), "
                               f"got {src.shape[-1]} and {tgt.shape[-1]}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=bool(tgt_is_causal))

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        return square_subsequent_mask(sz, dtype=dtype, device=device)
