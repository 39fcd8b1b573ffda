"""Attention and Transformer encoder modules with PyTorch's parameter names, so that
``state_dict`` keys match ``torch.nn.MultiheadAttention``/``TransformerEncoderLayer``."""

from __future__ import annotations

import copy
from types import MappingProxyType

from flowserve.nn import functional as nn_functional
from flowserve.nn import init
from flowserve.nn.module import Module
from flowserve.nn.modules.container import ModuleList
from flowserve.nn.modules.dropout import Dropout
from flowserve.nn.modules.linear import Linear
from flowserve.nn.modules.normalization import LayerNorm
from flowserve.nn.parameter import Parameter
from flowserve.ops import attention
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops.registry import fail_shape


class MultiheadAttention(Module):
    """``nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)``; ``forward`` returns
    ``(output, weights)`` with weights averaged over heads unless told otherwise.

    >>> import flowserve as flow
    >>> mha = flow.nn.MultiheadAttention(8, 2, batch_first=True)
    >>> x = flow.randn(3, 5, 8)
    >>> [t.shape for t in mha(x, x, x)]
    [flowserve.Size([3, 5, 8]), flowserve.Size([3, 5, 5])]
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, kdim=None,
                 vdim=None, batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention expected embed_dim divisible by num_heads, "
                             f"got {embed_dim} and {num_heads}")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.head_dim = embed_dim // num_heads
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        kw = dict(device=device, dtype=dtype)
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(creation.empty(3 * embed_dim, embed_dim, **kw))
        else:
            self.q_proj_weight = Parameter(creation.empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(creation.empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(creation.empty(embed_dim, self.vdim, **kw))
        self.in_proj_bias = Parameter(creation.empty(3 * embed_dim, **kw)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **kw)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def _projections(self):
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            ws = [ops_functional.getitem(self.in_proj_weight, slice(i * e, (i + 1) * e)) for i in range(3)]
        else:
            ws = [self.q_proj_weight, self.k_proj_weight, self.v_proj_weight]
        b = self.in_proj_bias
        bs = [None] * 3 if b is None else [ops_functional.getitem(b, slice(i * e, (i + 1) * e)) for i in range(3)]
        return list(zip(ws, bs))

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        if is_causal and attn_mask is None:
            raise ValueError("MultiheadAttention expected an attn_mask when is_causal=True "
                             "(is_causal is a hint about attn_mask)")
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = (ops_functional.unsqueeze(t, 0) for t in (query, key, value))
            key_padding_mask = ops_functional.unsqueeze(key_padding_mask, 0) if key_padding_mask is not None else None
        elif not self.batch_first:
            query, key, value = (ops_functional.transpose(t, 0, 1) for t in (query, key, value))
        if query.ndim != 3 or query.shape[-1] != self.embed_dim:
            fail_shape("MultiheadAttention", f"query (L, N, {self.embed_dim}) or (N, L, {self.embed_dim})",
                         tuple(query.shape))
        q, k, v = self._projections()
        p = self.dropout if self.training else 0.0
        out, weights = attention.multi_head_attention(
            query, key, value, self.num_heads, q, k, v, (self.out_proj.weight, self.out_proj.bias),
            attn_mask, key_padding_mask, need_weights, average_attn_weights, p)
        if unbatched:
            return ops_functional.squeeze(out, 0), (ops_functional.squeeze(weights, 0) if weights is not None else None)
        return (out if self.batch_first else ops_functional.transpose(out, 0, 1)), weights


_ACTIVATIONS = MappingProxyType({"relu": nn_functional.relu, "gelu": nn_functional.gelu})


def activation_of(activation, owner: str):
    """A layer's activation: ``"relu"``, ``"gelu"`` or a callable (PyTorch's choices)."""
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"{owner} expected activation 'relu' or 'gelu', got {activation!r}")
        return _ACTIVATIONS[activation]
    return activation


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block with residuals and LayerNorm (post-norm, or
    pre-norm with ``norm_first=True``), as ``torch.nn.TransformerEncoderLayer``."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = activation_of(activation, "TransformerEncoderLayer")

    def _sa_block(self, x, attn_mask, key_padding_mask):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask))
        return self.norm2(x + self._ff_block(x))


class LayerStack(Module):
    """``num_layers`` copies of ``layer`` (``layers.0``, ``layers.1``, ...) and an optional norm."""

    def __init__(self, layer: Module, num_layers: int, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm


class TransformerEncoder(LayerStack):
    """``num_layers`` copies of ``encoder_layer`` and an optional final norm."""

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
        return self.norm(x) if self.norm is not None else x
