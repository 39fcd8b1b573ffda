"""Softmax attention as a composite: scaled dot products, masks, softmax, values.

Mask conventions follow PyTorch: for ``scaled_dot_product_attention`` a bool ``attn_mask``
is True where attention is *allowed*; for ``multi_head_attention`` bool masks
(``attn_mask``, ``key_padding_mask``) are True where attention is *not* allowed. Float
masks are added to the scores in both.
"""

from __future__ import annotations

import math

import numpy as np

from flowserve import dtypes
from flowserve.ops import activation as activation_ops
from flowserve.ops import functional
from flowserve.ops.autocast_policy import lower_precision
from flowserve.ops.registry import fail_shape
from flowserve.tensor import from_array


def _allowed_to_bias(allowed, dtype):
    """Additive bias: 0 where ``allowed`` is True, -inf elsewhere."""
    return (
        functional.where(allowed, 0.0, float("-inf"))
        if allowed.dtype is dtypes.bool_
        else functional.cast(allowed, dtype)
    )


@lower_precision
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None):
    """``softmax(q @ k^T * scale + mask) @ v`` over (..., L, E) queries and (..., S, E) keys,
    as ``torch.nn.functional.scaled_dot_product_attention``."""
    if query.ndim < 2 or key.ndim != query.ndim or value.ndim != query.ndim or key.shape[-1] != query.shape[-1]:
        fail_shape("scaled_dot_product_attention", "query (..., L, E), key (..., S, E), value (..., S, Ev)",
                   f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = functional.matmul(query, functional.transpose(key, -2, -1)) * scale
    if is_causal:
        if attn_mask is not None:
            raise ValueError("scaled_dot_product_attention expected attn_mask=None when is_causal=True")
        causal = from_array(np.tril(np.ones((L, S), dtype=bool)), device=query.device)
        scores = scores + _allowed_to_bias(causal, scores.dtype)
    if attn_mask is not None:
        scores = scores + _allowed_to_bias(attn_mask, scores.dtype)
    weights = functional.softmax(scores, -1)
    if dropout_p > 0.0:
        weights = activation_ops.dropout(weights, dropout_p, training=True)
    return functional.matmul(weights, value)


def _blocked_to_bias(mask, dtype):
    """Additive bias: -inf where a bool ``mask`` is True (blocked); float masks as they are."""
    return functional.where(mask, float("-inf"), 0.0) if mask.dtype is dtypes.bool_ else functional.cast(mask, dtype)


def _attention_bias(attn_mask, key_padding_mask, n: int, heads: int, L: int, S: int, dtype):
    bias = None
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (L, S):
                fail_shape("MultiheadAttention", f"attn_mask ({L}, {S})", tuple(attn_mask.shape))
            bias = functional.reshape(_blocked_to_bias(attn_mask, dtype), (1, 1, L, S))
        elif tuple(attn_mask.shape) == (n * heads, L, S):
            bias = functional.reshape(_blocked_to_bias(attn_mask, dtype), (n, heads, L, S))
        else:
            fail_shape("MultiheadAttention", f"attn_mask ({L}, {S}) or ({n * heads}, {L}, {S})",
                       tuple(attn_mask.shape))
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (n, S):
            fail_shape("MultiheadAttention", f"key_padding_mask ({n}, {S})", tuple(key_padding_mask.shape))
        pad = functional.reshape(_blocked_to_bias(key_padding_mask, dtype), (n, 1, 1, S))
        bias = pad if bias is None else bias + pad
    return bias


def _split_heads(x, n: int, heads: int):
    """(N, L, E) -> (N, heads, L, E / heads)."""
    return functional.permute(functional.reshape(x, (n, x.shape[1], heads, x.shape[2] // heads)), [0, 2, 1, 3])


@lower_precision
def multi_head_attention(query, key, value, heads: int, q_proj, k_proj, v_proj, out_proj,
                         attn_mask=None, key_padding_mask=None, need_weights: bool = True,
                         average_attn_weights: bool = True, dropout_p: float = 0.0):
    """Multi-head attention over batch-first (N, L, E) inputs. ``*_proj`` are ``(weight, bias)``.

    Returns the output (N, L, E) and the attention weights (N, L, S) averaged over heads,
    (N, heads, L, S), or None.
    """
    n, L, S = query.shape[0], query.shape[1], key.shape[1]
    q = functional.matmul(query, functional.t(q_proj[0]))
    k = functional.matmul(key, functional.t(k_proj[0]))
    v = functional.matmul(value, functional.t(v_proj[0]))
    if q_proj[1] is not None:
        q, k, v = q + q_proj[1], k + k_proj[1], v + v_proj[1]
    q, k, v = _split_heads(q, n, heads), _split_heads(k, n, heads), _split_heads(v, n, heads)
    scores = functional.matmul(q * (1.0 / math.sqrt(q.shape[-1])), functional.transpose(k, -2, -1))
    bias = _attention_bias(attn_mask, key_padding_mask, n, heads, L, S, scores.dtype)
    if bias is not None:
        scores = scores + bias
    weights = functional.softmax(scores, -1)
    dropped = activation_ops.dropout(weights, dropout_p, training=True) if dropout_p > 0.0 else weights
    out = functional.reshape(
        functional.permute(functional.matmul(dropped, v), [0, 2, 1, 3]), (n, L, v.shape[1] * v.shape[3])
    )
    out = functional.matmul(out, functional.t(out_proj[0]))
    if out_proj[1] is not None:
        out = out + out_proj[1]
    if not need_weights:
        return out, None
    return out, (functional.mean(weights, 1) if average_attn_weights else weights)
