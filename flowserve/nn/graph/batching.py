"""Is a traced graph batch-polymorphic?

``batch_from_marks`` decides it from one trace, for ``flow.save`` and export: the batch
marks of the trace (dim 0 of the inputs, the ``BatchDim`` positions each node recorded)
say what the lowering computes at run time; the IR's shape rules are run again at two
other batch sizes with those positions following the batch, and every value must then
agree, and the outputs follow the batch in dim 0 only. Where a number made in ``build()``
equals the batch size (or its inverse) and meets a value reduced over the batch (a mean
over the batch written ``x.sum(0) / B``), the marks cannot tell it from a constant, and the
batch is reported fixed there. No ``build()`` runs.

``batch_mismatch`` compares two traces at two batch sizes (an in-process call at a new
batch size traces it, once per size):

A graph traced at batch size ``ba`` runs at ``bb`` when its trace at ``bb`` records the
same ops, values and constants up to the batch size, and every attribute that mentions
the batch size is one the lowering recomputes at run time: a position the trace marked as
the batch or an expression of it (``expand(x.shape[0], -1, -1)``, ``view(B * T, C)``, see
``flowserve.ops.dims``), or a reshape/expand dim that follows its input; and the graph's
outputs change size with the batch in dim 0 only, as the batch itself. Otherwise the batch size is baked into the graph, and
``batch_mismatch`` names the op and the user's source line that fixed it.
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.dispatch import Meta, infer_meta
from flowserve.errors import FlowserveError, ShapeError
from flowserve.ir.graph import Node
from flowserve.ir.interpreter import BATCH_ADAPTED_OPS, batch_adapted_attrs
from flowserve.ops.dims import EXPR_SUFFIX, BatchDim, batch_dims_at
from flowserve.ops.registry import REGISTRY


def _match(a, b, ba: int, bb: int) -> bool:
    """``a`` (traced at batch ``ba``) equals ``b`` (at ``bb``) where every int that
    differs is the batch size of its trace."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b or (a == ba and b == bb)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_match(x, y, ba, bb) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_match(a[k], b[k], ba, bb) for k in a)
    return a == b


def _follows_batch(shape1, shape2, ba: int, bb: int) -> bool:
    """Shapes equal up to dims that are the batch size, a multiple of it (a batch merged
    with other dims: ``(B * T, C)``), or the expression of it the trace recorded (``B + 1``)."""
    return len(shape1) == len(shape2) and all(
        a == b or (a % ba == 0 and b % bb == 0 and a // ba == b // bb) or (isinstance(a, BatchDim) and a.at(bb) == b)
        for a, b in zip(shape1, shape2))


def _output_mismatch(ir1, ir2, ba: int, bb: int) -> str | None:
    """Outputs with a size that follows the batch other than as the batch itself in dim 0
    (``(B * T, C)``, ``(3, 2 * B)``): the signature (-1 = the batch, in dim 0 only) cannot say
    so, and requests could not be merged and split along it, so the batch is fixed there."""
    return _output_sizes_mismatch([(v1.shape, ir2.outputs[i].shape if i < len(ir2.outputs) else None)
                                   for i, v1 in enumerate(ir1.outputs)], ba, bb)


def _output_sizes_mismatch(pairs: list, ba: int, bb: int) -> str | None:
    """``_output_mismatch`` on (shape at ``ba``, shape at ``bb``) per output."""
    for i, (shape1, shape2) in enumerate(pairs):
        if shape2 is None or len(shape1) != len(shape2):
            continue
        for axis, (a, b) in enumerate(zip(shape1, shape2)):
            if int(a) != int(b) and not (axis == 0 and a == ba and b == bb):
                return (f"output {i} has dim {axis} of size {a} at batch size {ba} and {b} at {bb}: it follows the "
                        "batch without being it (e.g. a batch merged with other dims, view(B * T, C)); return it "
                        "with the batch as its own dim 0 (view(B, T, C)) so the batch size can change")
    return None


def _same_constant(a: np.ndarray, b: np.ndarray, ba: int, bb: int) -> bool:
    if not _match(list(a.shape), list(b.shape), ba, bb):
        return False
    if a.shape == b.shape:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)  # batch-sized constants: uniform and equal
    return flat_a.size > 0 and flat_b.size > 0 and bool((flat_a == flat_a[0]).all() and
                                                         (flat_b == flat_a[0]).all())


def describe(node: Node) -> str:
    where = f" at {node.loc.splitlines()[0]}" if node.loc else ""
    scope = f" in module {node.scope!r}" if node.scope else ""
    return f"op {node.op!r}{scope}{where}"


def _node_mismatch(ir1, n1: Node, ir2, n2: Node, ba: int, bb: int) -> bool:
    if n1.op != n2.op or n1.inputs != n2.inputs or n1.outputs != n2.outputs:
        return True
    if n1.attrs == n2.attrs:
        return False
    if n1.op in BATCH_ADAPTED_OPS and n1.inputs:  # what the lowering computes at batch bb
        traced, actual = tuple(ir1.values[n1.inputs[0]].shape), tuple(ir2.values[n1.inputs[0]].shape)
        try:
            adapted = batch_adapted_attrs(n1, traced, actual, bb)
        except ShapeError:  # the traced attribute cannot serve the other batch size: it fixes the batch
            return True
        if "shape" not in adapted:  # a slice: its starts/ends at bb
            return adapted != n2.attrs
        return _resolved(adapted["shape"], actual) != list(n2.attrs["shape"]) or \
            {k: v for k, v in adapted.items() if k != "shape"} != {k: v for k, v in n2.attrs.items() if k != "shape"}
    return True


def _resolved(shape, input_shape) -> list:
    """``shape`` with a ``-1`` replaced by the size it stands for."""
    shape = [int(d) for d in shape]
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        shape[shape.index(-1)] = int(np.prod(input_shape)) // known if known else 0
    return shape


def batch_mismatch(first, ba: int, other, bb: int) -> str | None:
    """``None`` when traces ``first`` (batch ``ba``) and ``other`` (batch ``bb``) are one
    graph up to the batch size; else what fixed the batch size, naming the op and line."""
    ir1, ir2 = first.ir, other.ir
    for i, n1 in enumerate(ir1.nodes):
        n2 = ir2.nodes[i] if i < len(ir2.nodes) else None
        if n2 is None or _node_mismatch(ir1, n1, ir2, n2, ba, bb):
            return f"the batch size {ba} is fixed by {describe(n1)}"
        for name in n1.outputs:
            v1, v2 = ir1.values[name], ir2.values.get(name)
            # a slice's size follows its bounds, checked above (x[B // 2:] is B - B // 2 rows)
            if v2 is None or v1.dtype != v2.dtype or not (
                    n1.op == "slice" or _follows_batch(v1.shape, v2.shape, ba, bb)):
                return f"the batch size {ba} is fixed by {describe(n1)} (output size {tuple(v1.shape)})"
    if len(ir1.nodes) != len(ir2.nodes) or set(ir1.state) != set(ir2.state):
        return f"build() records different ops at batch sizes {ba} and {bb}"
    reason = _output_mismatch(ir1, ir2, ba, bb)
    if reason is not None:
        return f"the batch size {ba} is fixed: {reason}"
    for name, k in ir1.state_kinds.items():
        if k != "constant" and ir1.state[name].shape != ir2.state[name].shape:
            return f"state {name!r} changes size with the batch size"
    for name, c in first.constants.items():
        if name not in other.constants or not _same_constant(np.asarray(c), np.asarray(other.constants[name]), ba, bb):
            user = next((n for n in ir1.nodes if name in n.inputs), None)
            by = f", used by {describe(user)}" if user is not None else ""
            return (f"the batch size {ba} is fixed by a tensor made in build() with a fixed size "
                    f"{tuple(np.shape(c))}{by}; make it from the input's size (x.shape[0]) instead")
    return None



def failure_origin(exc: Exception, ba: int, bb: int) -> str:
    """Why a trace at batch ``bb`` failed: the failing op, and the op upstream that produced
    a size of ``ba`` (the batch size of the first trace) that did not follow the batch."""
    failed, ir = getattr(exc, "failed_node", None), getattr(exc, "failed_ir", None)
    if failed is None or ir is None:
        return f"build() fails at batch size {bb}: {exc}"
    producers = {out: node for node in ir.nodes for out in node.outputs}
    origin, frontier = None, [n for n in failed.inputs if ba in ir.values[n].shape]
    while frontier:
        node = producers.get(frontier.pop())
        if node is None:
            continue
        upstream = [n for n in node.inputs if ba in ir.values[n].shape]
        if not upstream:
            origin = node
            break
        frontier.extend(upstream)
    fixed = f"the batch size {ba} is fixed by {describe(origin)}; " if origin is not None else ""
    return f"{fixed}at batch size {bb}, {describe(failed)} fails: {exc}"


# -- one trace: the batch marks decide --------------------------------------------------------


def batch_from_marks(traced) -> tuple[int | None, str | None]:
    """``(batch, None)`` when ``traced`` runs at any batch size by its batch marks,
    ``(None, reason)`` when something in it fixes the batch size (naming the op and the
    user's line), ``(None, None)`` when its inputs share no batch dim. As a trace at another
    size would, a size at which the ops cannot run (``B // 2`` at an odd size) is passed
    over when the other size runs."""
    marks = traced.batch_marks
    if not marks.batched_inputs:
        return None, None
    ba = marks.size
    reason = _suspect_constant(traced, ba)
    if reason is not None:
        return None, reason
    failure = None
    for bb in (ba + 1, 2 * ba):  # 2 * ba: for a build() that splits the batch (B // 2)
        reason, ran = _shapes_at(traced, ba, bb)
        if ran:
            return (ba, None) if reason is None else (None, reason)
        failure = failure or reason
    return None, failure


def _has_batch(shape) -> bool:
    return any(isinstance(d, BatchDim) for d in shape)


def _suspect_constant(traced, ba: int) -> str | None:
    """A one-element tensor made in build() equal to the batch size or its inverse, used
    with a value that lost the batch (``x.sum(0) / B``, a mean over the batch): the trace
    cannot tell that number from a constant, so the batch is fixed there."""
    if ba < 2:  # at batch size 1 the number is 1: it changes nothing, and cannot be told apart
        return None
    ir = traced.ir
    producers = {out: node for node in ir.nodes for out in node.outputs}

    def lost_batch(name: str) -> bool:  # made by an op whose input held the batch and whose output does not
        node = producers.get(name)
        return node is not None and not _has_batch(ir.values[name].shape) and any(
            n in ir.values and _has_batch(ir.values[n].shape) for n in node.inputs)

    for name, c in traced.constants.items():
        array = np.asarray(c)
        if array.size != 1 or array.dtype.kind not in "fiu":
            continue
        value = float(array.reshape(-1)[0])
        if not (value == ba or np.isclose(value, 1.0 / ba, rtol=1e-6, atol=0.0)):
            continue
        for user in (n for n in ir.nodes if name in n.inputs):
            if any(lost_batch(n) for n in user.inputs if n != name):
                return (f"the batch size {ba} is fixed by {describe(user)}: it combines a value reduced over the "
                        f"batch with the number {value:g}, the batch size (or its inverse) as a plain number; "
                        "compute it with tensor ops (x.mean(0)) or from the input's size inside flowserve ops")
    return None


def _attrs_at(ir, node: Node, shapes: dict, bb: int) -> dict:
    """``node``'s attributes at batch size ``bb``, as the lowering computes them from the marks."""
    if node.op in BATCH_ADAPTED_OPS and node.inputs:
        return batch_adapted_attrs(node, tuple(_value(ir, node.inputs[0]).shape), shapes[node.inputs[0]], bb)
    attrs = dict(node.attrs)
    for key in node.batch:
        if key.endswith(EXPR_SUFFIX) or not isinstance(attrs.get(key), (list, tuple)):
            continue
        at = batch_dims_at(node.batch, key, bb)
        attrs[key] = [at.get(i, d) for i, d in enumerate(attrs[key])]
    return attrs


def _shapes_at(traced, ba: int, bb: int) -> tuple[str | None, bool]:
    """Run the IR's shape rules with the marked dims at batch size ``bb``: ``(None, True)``
    when every op accepts its inputs and the outputs follow the batch in dim 0 only, else
    why not, and whether every op ran (False: one refused its inputs at ``bb``)."""
    ir, marks = traced.ir, traced.batch_marks
    shapes = {name: tuple(int(d) for d in v.shape) for name, v in ir.state.items()}
    for v in ir.inputs:
        shape = [int(d) for d in v.shape]
        if 0 in marks.inputs.get(v.name, ()):
            shape[0] = bb
        shapes[v.name] = tuple(shape)
    for node in ir.nodes:
        prim = REGISTRY.get(node.op)
        if prim is None:
            return f"the batch size {ba} is fixed: op {node.op!r} is not a registered primitive", False
        try:
            attrs = _attrs_at(ir, node, shapes, bb)
            metas = [Meta(shapes[n], dtypes.from_name(_value(ir, n).dtype)) for n in node.inputs]
            outs = infer_meta(prim, metas, attrs)
        except (FlowserveError, ValueError, TypeError, IndexError, KeyError) as exc:
            return _fixed_before(ir, node, shapes, ba, bb, f"at batch size {bb}, {describe(node)} fails: {exc}"), False
        for name, meta in zip(node.outputs, outs):
            shapes[name] = tuple(int(d) for d in meta.shape)
    reason = _output_sizes_mismatch([(tuple(int(d) for d in v.shape), shapes[v.name]) for v in ir.outputs], ba, bb)
    if reason is not None:
        return f"the batch size {ba} is fixed: {reason}", True
    for i, v in enumerate(ir.outputs):
        now = shapes[v.name]
        if v.shape and 0 in marks.outputs.get(v.name, ()) and now[0] != bb:
            producer = next((n for n in ir.nodes if v.name in n.outputs), None)
            return _fixed_before(ir, producer, shapes, ba, bb, f"output {i} stays of size {now[0]} at batch size {bb}"), True
    return None, True


def _value(ir, name: str):
    return ir.values.get(name) or ir.state[name]


def _fixed_before(ir, failed: Node | None, shapes: dict, ba: int, bb: int, what: str) -> str:
    """The op upstream of ``failed`` that kept a size of ``ba`` where the batch changed: the
    first node (walking back over values that did not follow) whose own inputs all followed
    the batch or never held its size; a tensor made in build() of that size counts as fixed."""
    if failed is None:
        return f"the batch size {ba} is fixed: {what}"
    producers = {out: node for node in ir.nodes for out in node.outputs}

    def stuck(name: str) -> bool:
        traced = tuple(int(d) for d in _value(ir, name).shape)
        return ba in traced and shapes.get(name) == traced

    origin, node, seen = failed, failed, set()
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        upstream = [n for n in node.inputs if stuck(n)]
        made = [n for n in upstream if n in producers]
        origin = node
        if not made or len(made) < len(upstream):  # stuck inputs come from build()'s tensors, or nowhere
            break
        node = producers[made[0]]
    return f"the batch size {ba} is fixed by {describe(origin)}; {what}"
