"""Dropout's random keep-mask (the other random primitives are in ``flowserve.ops.random``).

``dropout_mask(x, p)`` is 1 where an element is kept (probability ``1 - p``) and 0 where it
is dropped, in ``x``'s dtype and shape. Eagerly it draws from flowserve's default generator
(``flow.manual_seed``); in an ``nn.Graph`` it lowers to ONNX ``RandomUniformLike``, so a
compiled graph draws fresh masks every call, seeded per node from the graph's seed. Eager and graph
runs therefore drop different elements: training-equality checks use ``p=0`` or eval mode.
"""

from __future__ import annotations

from flowserve.ops.generator import default_generator
from flowserve.ops.registry import Meta, fail_dtype, fail_shape, primitive


def _mask_meta(x: Meta, p: float) -> Meta:
    if not x.dtype.is_floating_point:
        fail_dtype("dropout", "a floating point input", x.dtype)
    if not 0.0 <= p <= 1.0:
        fail_shape("dropout", "a probability p in [0, 1]", p)
    return x


@primitive("dropout_mask", shape=_mask_meta, differentiable=False)
def dropout_mask(xp, x, p: float):
    uniform = default_generator.rng.random(x.shape)
    keep = xp.asarray(uniform) >= p
    return keep.astype(x.dtype)
