"""Cast fusion (``config.allow_fuse_cast_scale(True)``): casts that change nothing go.

- a cast to the dtype its input already has is dropped;
- a round trip ``cast(cast(x, wide), narrow)`` back to ``x``'s own dtype, through a dtype
  that holds every value of it exactly (float16/bfloat16 -> float32 -> same), is ``x``;
- ``cast(cast(x, a), b)`` where ``a`` holds ``x`` exactly becomes ``cast(x, b)``.
Mixed precision leaves many such pairs between consecutive low-precision ops; the
results are bit-identical.
"""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, PassResult
from flowserve.ir.passes.dce import eliminate_dead_code

# dtype -> dtypes that represent each of its values exactly
_EXACT_IN = {
    "float16": {"float32", "float64"},
    "bfloat16": {"float32", "float64"},
    "float32": {"float64"},
    "int32": {"int64", "float64"},
    "bool": {"int32", "int64", "float16", "bfloat16", "float32", "float64"},
}


def _replace_uses(ir: GraphIR, old: str, new: str) -> None:
    for node in ir.nodes:
        node.inputs = [new if n == old else n for n in node.inputs]


def fuse_cast_scale(ir: GraphIR) -> PassResult:
    protected = {v.name for v in ir.outputs} | set(ir.updates.values())
    producers = ir.producers()
    removed = 0
    for node in list(ir.nodes):
        if node.op != "cast" or node.outputs[0] in protected:
            continue
        src, out = node.inputs[0], node.outputs[0]
        target = node.attrs["dtype"]
        if ir.values[src].dtype == target:
            _replace_uses(ir, out, src)
            removed += 1
            continue
        first = producers.get(src)
        if first is None or first.op != "cast":
            continue
        origin = first.inputs[0]
        origin_dtype = ir.values[origin].dtype
        if ir.values[src].dtype not in _EXACT_IN.get(origin_dtype, ()):
            continue
        if origin_dtype == target:
            _replace_uses(ir, out, origin)
            removed += 1
        else:
            node.inputs = [origin]
    if removed:

        eliminate_dead_code(ir)
    return PassResult(ir, removed > 0)
