"""ONNX lowerings of the random primitives (``RandomUniformLike``, ``RandomNormalLike``).

Every random node gets its own seed, derived from the graph's seed and the node's output
name: ONNX Runtime keeps each node's generator across runs, so a session draws fresh values
on every call, and two nodes never share a stream. (Unseeded, ONNX Runtime seeds every
node alike, so two same-shaped dropouts would draw almost the same masks.)
"""

from __future__ import annotations

import zlib

from flowserve import dtypes
from flowserve.exporter.builder import onnx_dtype
from flowserve.exporter.lowering.registry import lowering

SEED_RANGE = 1 << 24  # ONNX's seed attribute is a float: integers below 2**24 are exact


def node_seed(ctx, node) -> float:
    """The seed of one random node: the graph's seed and the node's name, hashed."""
    graph_seed = int(ctx.ir.attrs.get("random_seed", 0))
    return float(zlib.crc32(f"{graph_seed}/{node.outputs[0]}".encode()) % SEED_RANGE)


@lowering("uniform_like")
def lower_uniform_like(b, node, ctx):
    dtype = onnx_dtype(ctx.meta(node.inputs[0]).dtype)
    b.op("RandomUniformLike", node.inputs, node.outputs, dtype=dtype, low=float(node.attrs["low"]),
         high=float(node.attrs["high"]), seed=node_seed(ctx, node))


@lowering("normal_like")
def lower_normal_like(b, node, ctx):
    dtype = onnx_dtype(ctx.meta(node.inputs[0]).dtype)
    b.op("RandomNormalLike", node.inputs, node.outputs, dtype=dtype, mean=float(node.attrs["mean"]),
         scale=float(node.attrs["std"]), seed=node_seed(ctx, node))


@lowering("dropout_mask")
def lower_dropout_mask(b, node, ctx):
    x = node.inputs[0]
    dtype = ctx.meta(x).dtype
    uniform = b.op1("RandomUniformLike", [x], dtype=onnx_dtype(dtype), low=0.0, high=1.0, seed=node_seed(ctx, node))
    keep = b.op1("GreaterOrEqual", [uniform, b.const(node.attrs["p"], dtypes.from_name(dtype).np)])
    b.op("Cast", [keep], node.outputs, to=onnx_dtype(dtype))
