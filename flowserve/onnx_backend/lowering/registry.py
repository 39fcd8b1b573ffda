"""The one table of ONNX lowerings (``LOWERINGS``), and the one lookup of an IR node's
lowering (``Lowerings.for_op``). A primitive's lowering is registered by the ``Primitive``
object itself (JAX's ``mlir.register_lowering(prim, rule)``), from the lowering module named
as the op family that declares it (``lowering/elementwise.py`` for
``flowserve.ops.elementwise``); the fused nodes that graph mode's own IR passes make (no
primitives) are registered by op name in ``lowering/graph_mode.py``.

A lowering is ``fn(b, node, ctx)``: it appends ONNX nodes to builder ``b`` that compute
``node.outputs`` (exact names) from ``node.inputs``; ``ctx.meta(name)`` gives a value's
shape and dtype.
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

from flowserve.dispatch import REGISTRY, Primitive
from flowserve.errors import ExportError
from flowserve.ops.dims import batch_steps


class Lowerings:
    """IR op -> its ONNX lowering. A primitive's is keyed by the ``Primitive`` (an IR node
    names its op: ``for_op`` finds the primitive in the op registry,
    ``flowserve.dispatch.REGISTRY``); a graph-mode fused node's by its op name
    (``register_fused``). Iterating gives the primitives."""

    def __init__(self):
        self._rules: dict[Primitive, Callable] = {}
        self._fused: dict[str, Callable] = {}

    def register(self, prim: Primitive, fn: Callable) -> None:
        if not isinstance(prim, Primitive):
            raise ExportError(f"an ONNX lowering is registered for a Primitive, got {prim!r}")
        if prim in self._rules:
            raise ExportError(f"ONNX lowering of {prim.name!r} is registered twice")
        self._rules[prim] = fn

    def register_fused(self, op: str, fn: Callable) -> None:
        """Register the lowering of ``op``, a node that a graph-mode IR pass makes (never in
        a saved graph, so no primitive)."""
        if REGISTRY.get(op) is not None:
            raise ExportError(f"{op!r} is a primitive: its ONNX lowering is registered for the Primitive")
        if op in self._fused:
            raise ExportError(f"ONNX lowering of {op!r} is registered twice")
        self._fused[op] = fn

    def for_op(self, name: str, extra: Mapping[str, Callable] | None = None) -> Callable | None:
        """The lowering of the IR op ``name``, the only place the order is decided: the
        caller's ``extra`` (op name -> lowering: the exporter's fused groups, bound to its
        target) first, then the primitive's, then graph mode's fused node's. None where
        there is none."""
        if extra and name in extra:
            return extra[name]
        prim = REGISTRY.get(name)
        if prim is not None:
            return self._rules.get(prim)
        return self._fused.get(name)

    def __contains__(self, prim: Primitive) -> bool:
        return prim in self._rules

    def __iter__(self) -> Iterator[Primitive]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)


LOWERINGS = Lowerings()


def lowering(*prims: Primitive):
    """``@lowering(prims.gather)``: register the decorated function for each primitive."""

    def register(fn: Callable) -> Callable:
        for prim in prims:
            LOWERINGS.register(prim, fn)
        return fn

    return register


def simple(op_type: str, *prims: Primitive, **fixed_attrs):
    """Register ``prims`` as one ONNX node of ``op_type`` with the same inputs and outputs."""

    def lower(b, node, ctx):
        b.op(op_type, node.inputs, node.outputs, **fixed_attrs)

    for prim in prims:
        LOWERINGS.register(prim, lower)


class LoweringContext:
    """What a lowering may read besides its node: value metadata, the builder, whether the
    batch is dynamic, ``cpu_provider`` (graph mode on ONNX Runtime's CPU provider: the
    formulations it runs fastest), ``nchwc_block`` (its NCHWc channel block for training
    graphs, else 0: standard ONNX operators only) and ``batch_norm_kernel`` (with
    ``cpu_provider``: training batch norm as the provider's ``BatchNormalization`` kernel);
    ``cuda_provider``: graph mode on ONNX Runtime's CUDA provider (the fewest nodes)."""

    def __init__(self, ir, builder, dynamic_batch: bool, nchwc_block: int = 0, cpu_provider: bool = False,
                 batch_norm_kernel: bool = True, cuda_provider: bool = False):
        self.ir = ir
        self.b = builder
        self.dynamic_batch = dynamic_batch
        self.nchwc_block = nchwc_block
        self.cpu_provider = cpu_provider
        self.batch_norm_kernel = cpu_provider and batch_norm_kernel
        self.cuda_provider = cuda_provider
        self.reordered: dict = {}  # value name -> its NCHWc copy (one ReorderInput per value)
        self.saved: dict = {}  # (what, value names) -> an ONNX value a later node reuses (batch norm's x - mean)

    def meta(self, name: str):
        return self.ir.values[name]

    def batch_size(self) -> str:
        """A 1-element int64 tensor: the run-time batch (dim 0 of the graph's first input)."""
        name = getattr(self, "_batch_size", None)
        if name is None:
            shape = self.b.op1("Shape", [self.ir.inputs[0].name])
            name = self.b.op1("Slice", [shape, self.b.const([0]), self.b.const([1])])
            self._batch_size = name
        return name

    def batch_expression(self, steps) -> str:
        """A 1-element int64 tensor: ``steps`` (``flowserve.ops.dims``) applied to the run-time
        batch (``B * T``, ``B // 2``, ``B + 1``: Mul, Div, Add; dims are never negative where
        Div's truncation and floor division could differ)."""
        name = self.batch_size()
        for op, k in steps:
            name = self.b.op1({"mul": "Mul", "div": "Div", "add": "Add"}[op], [name, self.b.const([int(k)])])
        return name

    def shape_operand(self, node, attr: str, dims: list) -> str:
        """``dims`` as a 1-D int64 tensor; with a dynamic batch, the positions that the trace
        marked as the batch size (``node.batch``) read it at run time."""
        positions = set(node.batch.get(attr, ())) if self.dynamic_batch and self.ir.inputs else set()
        if not positions:
            return self.b.const(list(dims))
        steps = batch_steps(node.batch, attr)
        pieces, run = [], []
        for i, d in enumerate(dims):
            if i in positions:
                if run:
                    pieces.append(self.b.const(run))
                    run = []
                pieces.append(self.batch_expression(steps.get(i, ())))
            else:
                run.append(int(d))
        if run:
            pieces.append(self.b.const(run))
        return pieces[0] if len(pieces) == 1 else self.b.op1("Concat", pieces, axis=0)
