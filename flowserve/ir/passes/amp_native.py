"""Graph mode on CUDA: AMP's emulated float16 compute as native float16 kernels.

The AMP pass (``flowserve.ir.passes.amp``) writes the form a saved graph keeps, the same
numbers on every runtime: each matmul/convolution reads its inputs rounded through float16
and computes in float32, its result rounded through float16::

    x16 = cast(x, float16); xr = cast(x16, float32); raw = conv(xr, wr); y = cast(cast(raw, float16), float32)

On ONNX Runtime's CUDA provider the op can read ``x16`` itself: its float16 kernels (cuDNN,
cuBLAS on tensor cores) take float16 inputs, accumulate in float32 and round the result to
float16, which is what the emulated form computes, with two casts fewer per input and one
fewer per output::

    raw16 = conv(x16, w16); y = cast(raw16, float32)

This pass makes that rewrite on the private copy of the IR graph mode lowers for CUDA; the IR
a graph saves keeps the emulated form (``ir.attrs["amp"]["native"]`` stays False). bfloat16
stays emulated.
"""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, PassResult
from flowserve.ir.passes.amp import is_compute_op
from flowserve.ir.passes.dce import eliminate_dead_code
from flowserve.ir.passes.pattern import PatternGraph

LOW = "float16"


def _rounded_input(g: PatternGraph, name: str) -> str | None:
    """``x16`` where ``name`` is ``cast(x16, float32)`` of a float16 ``x16``, else None."""
    cast = g.producer(name)
    if cast is None or cast.op != "cast" or cast.attrs.get("dtype") != "float32":
        return None
    source = cast.inputs[0]
    return source if g.ir.values[source].dtype == LOW else None


def _rounding_cast(g: PatternGraph, raw: str):
    """The ``cast(raw, float16)`` node that alone reads the compute op's float32 ``raw``, else None."""
    users = g.users(raw)
    if len(users) != 1 or raw in g.output_names:
        return None
    cast = users[0]
    return cast if cast.op == "cast" and cast.attrs.get("dtype") == LOW else None


def _rewrite(g: PatternGraph, node) -> bool:
    """``node`` reading float16 inputs and writing its float16 results, where it is an AMP
    compute op in the emulated form."""
    values = g.ir.values
    floats = [i for i, n in enumerate(node.inputs) if values[n].dtype in ("float32", LOW)]
    lows = {i: _rounded_input(g, node.inputs[i]) for i in floats}
    casts = [_rounding_cast(g, out) for out in node.outputs]
    if not floats or any(v is None for v in lows.values()) or any(c is None for c in casts):
        return False
    for i, low in lows.items():
        node.inputs[i] = low
    for k, cast in enumerate(casts):
        node.outputs[k] = cast.outputs[0]  # the op writes the float16 value the cast wrote
        g.ir.nodes.remove(cast)
    return True


def amp_native_float16(ir: GraphIR) -> PassResult:
    """Every emulated float16 matmul/convolution of ``ir`` as a native float16 op."""
    amp = ir.attrs.get("amp") or {}
    if amp.get("dtype") != LOW or amp.get("native"):
        return PassResult(ir, False)
    g = PatternGraph(ir, {})
    g.refresh()
    count = 0
    for node in [n for n in ir.nodes if is_compute_op(n.op)]:
        if _rewrite(g, node):
            g.refresh()
            count += 1
    if count:
        eliminate_dead_code(ir)
    return PassResult(ir, count > 0)

