"""Named dynamic dims beyond the batch, shared between inputs (``torch.export``'s ``Dim``).

``flow.save(graph, dir, dynamic_dims={"x": {0: "nodes"}, "adj": {0: "nodes", 1: "nodes"}})``
says that dim 0 of ``x`` and dims 0 and 1 of ``adj`` are one size, ``nodes``, free at run
time. ``flow.save`` checks it by tracing the deployable graph again with every named dim one
larger: the graph must record the same ops, attributes and constants (no size of a named dim
baked into an attribute or a tensor), and the outputs' dims that change are named after the
dim they follow. ``flow.load``, export and the server then accept any size, the same for
every dim of one name, and refuse inputs that disagree naming both.

>>> flow.save(graph, "gcn", dynamic_dims={"x": {0: "nodes"}, "adj": {0: "nodes", 1: "nodes"}})  # doctest: +SKIP
"""

from __future__ import annotations

import re

import numpy as np

from flowserve import dtypes
from flowserve.errors import GraphError, ShapeError
from flowserve.ir.interpreter import run_ir
from flowserve.nn.graph.compiled import CompiledGraph
from flowserve.nn.graph.batching import describe
from flowserve.tensor import Tensor

DIM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def normalize(dynamic_dims: dict, ir) -> dict:
    """``{input name: {axis: name}}`` checked against ``ir``'s inputs: known names, axes in
    range (negative ones counted from the end), identifier names, one traced size per name."""
    inputs = {v.name: v for v in ir.inputs}
    if not isinstance(dynamic_dims, dict):
        raise TypeError(f"dynamic_dims: expected {{input name: {{axis: dim name}}}}, got {type(dynamic_dims).__name__}")
    named, sizes = {}, {}
    for tensor, axes in dynamic_dims.items():
        if tensor not in inputs:
            raise GraphError(f"dynamic_dims: {tensor!r} is not an input of {ir.name} (inputs: {', '.join(inputs)})")
        shape = inputs[tensor].shape
        for axis, name in dict(axes).items():
            if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                raise GraphError(f"dynamic_dims: input {tensor!r} has {len(shape)} dims, got axis {axis!r}")
            if not isinstance(name, str) or not DIM_NAME.match(name):
                raise GraphError(f"dynamic_dims: dim names are identifiers, got {name!r} for {tensor!r} axis {axis}")
            axis %= len(shape)
            sizes.setdefault(name, []).append((tensor, axis, int(shape[axis])))
            named.setdefault(tensor, {})[axis] = name
    for name, uses in sizes.items():
        if len({size for *_, size in uses}) > 1:
            given = ", ".join(f"{t!r} dim {a} = {s}" for t, a, s in uses)
            raise GraphError(f"dynamic_dims: dim {name!r} has different sizes in the traced inputs: {given}")
    return named


def check_named_dims(first, other, named: dict) -> dict:
    """Traces ``first`` and ``other`` (every named dim one larger): the dims of the inputs and
    outputs that follow the named dims (tensor name -> {axis: name}); raises where the graph
    fixes a named dim's size, naming the op and its source line."""
    sizes = {name: int(first.ir.values[t].shape[a]) for t, axes in named.items() for a, name in axes.items()}
    ir1, ir2 = first.ir, other.ir
    for n1, n2 in zip(ir1.nodes, ir2.nodes):
        if n1.op != n2.op or n1.inputs != n2.inputs or n1.outputs != n2.outputs or n1.attrs != n2.attrs:
            raise GraphError(f"dynamic_dims: the size of {_names(sizes)} is fixed by {describe(n1)} "
                             "(it records the size in an attribute); the dims cannot be dynamic")
    if len(ir1.nodes) != len(ir2.nodes) or set(ir1.state) != set(ir2.state):
        raise GraphError(f"dynamic_dims: build() records different ops when {_names(sizes)} change size")
    for name, c in first.constants.items():
        c2 = other.constants.get(name)
        if c2 is None or np.shape(c) != np.shape(c2) or not np.array_equal(c, c2, equal_nan=True):
            user = next((n for n in ir1.nodes if name in n.inputs), None)
            by = f", used by {describe(user)}" if user is not None else ""
            raise GraphError(f"dynamic_dims: a tensor made in build() has the size of {_names(sizes)} "
                             f"{tuple(np.shape(c))}{by}; make it from the input's size instead")
    dims = {t: dict(axes) for t, axes in named.items()}
    for v1 in ir1.outputs:
        v2 = ir2.values[v1.name]
        for axis, (a, b) in enumerate(zip(v1.shape, v2.shape)):
            if int(a) == int(b):
                continue
            followed = [name for name, size in sizes.items() if size == int(a)]
            if int(b) != int(a) + 1 or len(followed) != 1:
                raise GraphError(f"dynamic_dims: output {v1.name!r} dim {axis} changes with {_names(sizes)} "
                                 f"without being one of them ({a} -> {b}); return it with the dim as its own axis")
            dims.setdefault(v1.name, {})[axis] = followed[0]
    return dims


def verify_lowering(first, other, dims: dict) -> None:
    """Run the graph lowered with ``dims`` symbolic at the second trace's sizes and compare
    with flowserve's interpreter on that trace: a lowering that wrote a value's traced size
    into the model (not an attribute the traces compare) is caught here, before saving."""
    rng = np.random.default_rng(0)
    feeds = {v.name: _random(rng, v) for v in other.ir.inputs}
    state = {**{k: t.numpy() for k, t in other.state.items()}, **other.constants}
    want = run_ir(other.ir, feeds, state)
    try:
        compiled = CompiledGraph(first, training=False, dynamic_dims=dims)
        got = compiled.run([Tensor._wrap(feeds[v.name]) for v in first.ir.inputs])
    except Exception as exc:  # ONNX Runtime refuses the other sizes
        raise GraphError(f"dynamic_dims: the lowered graph does not run with {_names(_sizes(first.ir, dims))} "
                         f"changed ({type(exc).__name__}: {str(exc)[:300]})") from None
    for v, array in zip(other.ir.outputs, got):
        ref, out = want[v.name], array.numpy()
        scale = max(1.0, float(np.abs(ref).max())) if ref.size and ref.dtype.kind == "f" else 1.0
        if out.shape != ref.shape or (ref.dtype.kind == "f" and not np.allclose(out, ref, rtol=1e-4, atol=1e-4 * scale)):
            raise GraphError(f"dynamic_dims: the lowered graph gives output {v.name!r} of size {out.shape} where "
                             f"build() gives {ref.shape} with {_names(_sizes(first.ir, dims))} changed (or other "
                             "values): a lowering fixes their size; the dims cannot be dynamic")


def _random(rng, value) -> np.ndarray:
    dtype = dtypes.from_name(value.dtype).np
    shape = tuple(int(d) for d in value.shape)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype)  # indices: 0 is valid for every table


def _sizes(ir, dims: dict) -> dict:
    return {name: int(ir.values[t].shape[a]) for t, axes in dims.items() if t in ir.values for a, name in axes.items()}


def retrace_failure(exc: Exception, ir, named: dict) -> GraphError:
    """Why build() cannot run with the named dims one larger: the failing op and its line."""
    sizes = {name: int(ir.values[t].shape[a]) for t, axes in named.items() for a, name in axes.items()}
    failed = getattr(exc, "failed_node", None)
    where = f" at {describe(failed)}" if failed is not None else ""
    grown = ", ".join(f"{name!r} = {size + 1}" for name, size in sizes.items())
    return GraphError(f"dynamic_dims: the size of {_names(sizes)} is fixed: build() fails with {grown}{where}: {exc}")


def _names(sizes: dict) -> str:
    return ", ".join(f"{name!r}" for name in sizes)


def grown_shapes(ir, named: dict) -> dict:
    """Input name -> shape with every named dim one larger (the second trace's inputs)."""
    sizes = {name: int(ir.values[t].shape[a]) + 1 for t, axes in named.items() for a, name in axes.items()}
    shapes = {}
    for v in ir.inputs:
        shape = [int(d) for d in v.shape]
        for axis, name in named.get(v.name, {}).items():
            shape[axis] = sizes[name]
        shapes[v.name] = tuple(shape)
    return shapes


def check_shared_sizes(graph_name: str, dims: dict, shapes: dict) -> None:
    """Every named dim has one size across the inputs given (``shapes``: name -> shape)."""
    seen: dict = {}
    for tensor, axes in dims.items():
        shape = shapes.get(tensor)
        if shape is None:
            continue
        for axis, name in axes.items():
            size = int(shape[int(axis)])
            if name in seen and seen[name][2] != size:
                other, other_axis, other_size = seen[name]
                raise ShapeError(f"{graph_name}: dim {name!r} is {other_size} in input {other!r} (dim {other_axis}) "
                                 f"but {size} in input {tensor!r} (dim {axis}); they must be equal")
            seen.setdefault(name, (tensor, int(axis), size))
