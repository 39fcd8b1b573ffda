"""ONNX lowerings of the random primitives (``RandomUniformLike``, ``RandomNormalLike``).

Every random node gets its own seed, derived from the graph's seed and the node's output
name: ONNX Runtime keeps each node's generator across runs, so a session draws fresh values
on every call, and two nodes never share a stream. (Unseeded, ONNX Runtime seeds every
node alike, so two same-shaped dropouts would draw almost the same masks.)

``dropout_mask`` spends one float32 draw on two elements: ONNX Runtime's CPU generator
draws one element at a time on one thread (a third of a Transformer's training step). For a
uniform ``u``, the first element is kept where ``u >= p``; the second where ``u`` falls in
``[p**2, p)`` or ``[2p - p**2, 1)``, which has probability ``1 - p`` whether or not the
first was kept (given ``u < p``, ``u / p`` is uniform again; given ``u >= p``,
``(u - p) / (1 - p)`` is): two independent decisions at exactly ``p``, for every ``p``, to
within float32 rounding of the thresholds, as for one draw per element. With
``g(t) = u >= t`` the second decision is ``g(p**2) xor g(p) xor g(2p - p**2)``.

``uniform_seeded`` (a random op given ``generator=``) is its counter-based hash written in
ONNX integer ops, fed its seed per call: the same numbers as its numpy kernel. Where the seed
is baked into the model (a saved, loaded or exported graph: the generator stays in the
process that traced it), it lowers to ``RandomUniformLike`` like an op without a generator.
"""

from __future__ import annotations

import zlib

import numpy as np
from onnx import numpy_helper

from flowserve import dtypes
from flowserve.onnx_backend.builder import onnx_dtype
from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import dropout
from flowserve.ops import random as prims
from flowserve.ops.random import HASH_DROP_BITS, HASH_PRIME, HASH_ROUNDS, HASH_SEED_MULT, HASH_STREAM_MULT

SEED_RANGE = 1 << 24  # ONNX's seed attribute is a float: integers below 2**24 are exact


def node_seed(ctx, node) -> float:
    """The seed of one random node: the graph's seed and the node's name, hashed."""
    graph_seed = int(ctx.ir.attrs.get("random_seed", 0))
    return float(zlib.crc32(f"{graph_seed}/{node.outputs[0]}".encode()) % SEED_RANGE)


@lowering(prims.uniform_like)
def lower_uniform_like(b, node, ctx):
    dtype = onnx_dtype(ctx.meta(node.inputs[0]).dtype)
    b.op("RandomUniformLike", node.inputs, node.outputs, dtype=dtype, low=float(node.attrs["low"]),
         high=float(node.attrs["high"]), seed=node_seed(ctx, node))


@lowering(prims.normal_like)
def lower_normal_like(b, node, ctx):
    dtype = onnx_dtype(ctx.meta(node.inputs[0]).dtype)
    b.op("RandomNormalLike", node.inputs, node.outputs, dtype=dtype, mean=float(node.attrs["mean"]),
         scale=float(node.attrs["std"]), seed=node_seed(ctx, node))


def paired_thresholds(p: float) -> tuple[float, float, float]:
    """``(p**2, p, 2p - p**2)``: where one uniform draw keeps the first of two elements
    (``u >= p``) and, independently, the second (``u`` in ``[p**2, p)`` or ``[2p - p**2, 1)``),
    both with probability ``1 - p``."""
    return p * p, p, 2 * p - p * p


def _paired_keep(b, x, shape: tuple, p: float, seed: float) -> str:
    """Keep decisions (bool) shaped like ``x`` from half as many float32 draws (see the
    module's docstring): the first half ``u >= p``, the second ``g(p**2) ^ g(p) ^ g(2p - p**2)``."""
    count = b.op1("Reshape", [b.op1("Size", [x]), b.const([1])])
    draws = b.op1("Div", [b.op1("Add", [count, b.const([1])]), b.const([2])])
    like = b.op1("ConstantOfShape", [draws], value=numpy_helper.from_array(np.zeros(1, np.uint8)))  # its shape only
    uniform = b.op1("RandomUniformLike", [like], dtype=onnx_dtype("float32"), low=0.0, high=1.0, seed=seed)
    low, middle, high = (b.op1("GreaterOrEqual", [uniform, b.const(t, np.float32)]) for t in paired_thresholds(p))
    second = b.op1("Xor", [b.op1("Xor", [low, middle]), high])
    keep = b.op1("Concat", [middle, second], axis=0)
    if not any(type(d) is int and d % 2 == 0 for d in shape):  # an odd count: one decision too many
        keep = b.op1("Slice", [keep, b.const([0]), count])
    return b.op1("Reshape", [keep, b.op1("Shape", [x])])


@lowering(dropout.dropout_mask)
def lower_dropout_mask(b, node, ctx):
    x = node.inputs[0]
    dtype = ctx.meta(x).dtype
    p, seed = float(node.attrs["p"]), node_seed(ctx, node)
    if 0 < p < 1:
        keep = _paired_keep(b, x, tuple(ctx.meta(x).shape), p, seed)
    else:
        uniform = b.op1("RandomUniformLike", [x], dtype=onnx_dtype(dtype), low=0.0, high=1.0, seed=seed)
        keep = b.op1("GreaterOrEqual", [uniform, b.const(p, dtypes.from_name(dtype).np)])
    b.op("Cast", [keep], node.outputs, to=onnx_dtype(dtype))


@lowering(prims.uniform_seeded)
def lower_uniform_seeded(b, node, ctx):
    x, seed = node.inputs
    dtype = onnx_dtype(ctx.meta(x).dtype)
    if seed in b.initializers:  # no generator feeds a saved graph: draw as ONNX Runtime does
        b.op("RandomUniformLike", [x], node.outputs, dtype=dtype, low=0.0, high=1.0, seed=node_seed(ctx, node))
        return
    i64 = lambda v: b.const(v, np.int64)  # noqa: E731
    prime = i64(HASH_PRIME)
    index = b.op1("Range", [i64(0), b.op1("Size", [x]), i64(1)])
    offset = b.op1("Add", [b.op1("Mul", [b.op1("Mod", [seed, prime]), i64(HASH_SEED_MULT)]),
                           i64(int(node.attrs["stream"]) * HASH_STREAM_MULT)])
    h = b.op1("Mod", [b.op1("Add", [index, offset]), prime])
    for mult, add, shift in HASH_ROUNDS:
        h = b.op1("Mod", [b.op1("Add", [b.op1("Mul", [h, i64(mult)]), i64(add)]), prime])
        h = b.op1("BitwiseXor", [h, b.op1("Div", [h, i64(1 << shift)])])
    bits = b.op1("Cast", [b.op1("Div", [h, i64(1 << HASH_DROP_BITS)])], to=dtype)
    scaled = b.op1("Mul", [bits, b.const(2.0 ** (HASH_DROP_BITS - 31), dtypes.from_name(ctx.meta(x).dtype).np)])
    b.op("Reshape", [scaled, b.op1("Shape", [x])], node.outputs)
