"""How tensors print: values for eager tensors, meta for lazy ones (OneFlow's format)."""

from __future__ import annotations

import numpy as np


def meta_repr(t, lazy: bool | None = None) -> str:
    """``tensor(..., size=(64, 3), dtype=flowserve.float32)``, as nn.Graph prints state."""
    parts = ["..."]
    if t.device.type != "cpu":
        parts.append(f"device='{t.device}'")
    if lazy if lazy is not None else t.is_lazy:
        parts.append("is_lazy='True'")
    parts.append(f"size={tuple(t.shape)}")
    parts.append(f"dtype={t.dtype!r}")
    if t.requires_grad and t.is_leaf:
        parts.append("requires_grad=True")
    return f"tensor({', '.join(parts)})"


def tensor_repr(t) -> str:
    if t.is_lazy:
        return meta_repr(t)
    data = t.numpy()
    if data.dtype.kind == "V" or t.dtype.name == "bfloat16":
        data = data.astype(np.float32)
    body = np.array2string(data, separator=", ", prefix="tensor(", precision=4,
                           floatmode="maxprec_equal" if data.dtype.kind == "f" else "maxprec")
    extras = []
    if t.device.type != "cpu":
        extras.append(f"device='{t.device}'")
    extras.append(f"dtype={t.dtype!r}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return f"tensor({body}, {', '.join(extras)})"
