"""Automatic mixed precision: compute-bound ops run in float16/bfloat16, everything else
in float32.

Each matmul/convolution node (forward and backward alike) gets its float32 inputs cast to
the low-precision dtype and its output cast back to float32, so parameters stay float32
master weights, elementwise ops, reductions and the optimizer update stay float32, and
the value names other nodes read are unchanged. Where the runtime has no low-precision
kernel (ONNX Runtime's CPU provider: none for bfloat16, and float16 ones that compute
in float32 with the casts removed) the pass emulates it exactly: inputs
and outputs are rounded through the low-precision dtype and the op computes in float32,
which is what tensor cores do (low-precision inputs, float32 accumulation).

>>> ir, changed = amp_cast(ir, "float16")          # doctest: +SKIP
"""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, Node, PassResult, Value

LOW_PRECISION = ("float16", "bfloat16")


def is_compute_op(op: str) -> bool:
    """Ops AMP runs in low precision: matrix products and convolutions."""
    return op in ("matmul", "bmm", "linear") or op.startswith("conv")


class _Rewriter:
    def __init__(self, ir: GraphIR, dtype: str, native: bool):
        self.ir, self.dtype, self.native = ir, dtype, native
        self.cast_cache: dict = {}
        self.nodes: list = []

    def _cast(self, name: str, dtype: str, scope: str, loc: str) -> str:
        meta = self.ir.values[name]
        out = f"{name}:{dtype}"
        if out not in self.ir.values:
            self.ir.add_value(Value(out, meta.shape, dtype))
            self.nodes.append(Node("cast", [name], [out], {"dtype": dtype}, scope, loc))
        return out

    def low(self, name: str, scope: str, loc: str) -> str:
        """``name`` as the compute op should read it (cast once, shared by all users)."""
        key = name
        if key not in self.cast_cache:
            lowered = self._cast(name, self.dtype, scope, loc)
            if not self.native:
                lowered = self._cast(lowered, "float32", scope, loc)
            self.cast_cache[key] = lowered
        return self.cast_cache[key]

    def rewrite(self, node: Node) -> None:
        floats = [self.ir.values[n].dtype == "float32" for n in node.inputs]
        outs_f32 = all(self.ir.values[n].dtype == "float32" for n in node.outputs)
        if not is_compute_op(node.op) or not any(floats) or not outs_f32:
            self.nodes.append(node)
            return
        node.inputs = [self.low(n, node.scope, node.loc) if f else n for n, f in zip(node.inputs, floats)]
        final_outputs = list(node.outputs)
        computed = []
        for name in final_outputs:
            meta = self.ir.values[name]
            raw = f"{name}:amp"
            self.ir.add_value(Value(raw, meta.shape, self.dtype if self.native else "float32"))
            computed.append(raw)
        node.outputs = computed
        self.nodes.append(node)
        for raw, name in zip(computed, final_outputs):
            src = raw if self.native else self._cast(raw, self.dtype, node.scope, node.loc)
            self.nodes.append(Node("cast", [src], [name], {"dtype": "float32"}, node.scope, node.loc))


def amp_cast(ir: GraphIR, dtype: str = "float16", *, native: bool = True) -> PassResult:
    """Run matmuls and convolutions of ``ir`` in ``dtype``; ``native=False`` emulates it
    in float32 with rounding through ``dtype`` (for runtimes without such kernels)."""
    if dtype not in LOW_PRECISION:
        raise ValueError(f"AMP dtype must be one of {LOW_PRECISION}, got {dtype!r}")
    rewriter = _Rewriter(ir, dtype, native)
    before = len(ir.nodes)
    for node in ir.nodes:
        rewriter.rewrite(node)
    ir.nodes = rewriter.nodes
    ir.attrs["amp"] = {"dtype": dtype, "native": native}
    return PassResult(ir, len(ir.nodes) != before)
