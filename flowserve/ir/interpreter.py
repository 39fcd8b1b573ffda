"""Run a ``GraphIR`` on numpy arrays, node by node, with the registry's kernels.

This is flowserve's own execution of a graph without ONNX: the exporter checks every
model it writes against it, so the oracle never shares code with ONNX Runtime.

The IR records the shapes it was traced with. When the batch size of a call differs from
the traced one, the attributes that spell out a full shape (``reshape``, ``expand``)
are re-derived for the actual input, exactly as the ONNX lowering keeps them dynamic:
leading dims that the reshape copies stay copied, a batch merged into another dim
becomes ``-1``.

>>> outs = run_ir(ir, {"x": np.ones((7, 4), np.float32)}, state_arrays)  # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes
from flowserve.errors import FlowserveError, ShapeError
from flowserve.ir.graph import GraphIR, Node
from flowserve.ops.dims import batch_dims_at
from flowserve.ops.registry import REGISTRY


def run_ir(ir: GraphIR, inputs: dict, state: dict) -> dict:
    """Output name -> array of ``ir`` on ``inputs`` (input name -> array) and ``state``
    (state name -> array, the parameters, buffers and constants)."""
    env: dict = {}
    for v in ir.inputs:
        if v.name not in inputs:
            raise FlowserveError(f"graph {ir.name} expects input {v.name!r}, got {sorted(inputs)}")
        env[v.name] = np.asarray(inputs[v.name])
    for name in ir.state:
        if name not in state:
            raise FlowserveError(f"graph {ir.name} needs state tensor {name!r}, which was not given")
        env[name] = np.asarray(state[name])
    for node in ir.nodes:
        run_node(ir, node, env)
    return {v.name: env[v.name] for v in ir.outputs}


def run_node(ir: GraphIR, node: Node, env: dict) -> None:
    """Run one node's kernel on the values in ``env`` and store its outputs there."""
    prim = REGISTRY.get(node.op)
    if prim is None:
        raise FlowserveError(f"op {node.op!r} (node {node.outputs[0]!r}) is not a registered primitive")
    args = [env[name] for name in node.inputs]
    first = env.get(ir.inputs[0].name) if ir.inputs else None
    attrs = node.attrs
    if args and node.op in BATCH_ADAPTED_OPS:
        attrs = batch_adapted_attrs(node, tuple(ir.values[node.inputs[0]].shape), tuple(args[0].shape),
                                    first.shape[0] if first is not None and first.ndim else None)
    try:
        result = prim.kernel(np, *args, **attrs)
    except FlowserveError:
        raise
    except Exception as exc:
        given = ", ".join(f"{a.shape} {a.dtype}" for a in args)
        raise FlowserveError(f"{node.op} (node {node.outputs[0]!r}, scope {node.scope!r}) failed on "
                             f"({given}): {exc}") from exc
    results = result if prim.multiple_results else (result,)
    for name, array in zip(node.outputs, results):
        env[name] = _as_dtype(np.asarray(array), ir.values[name].dtype)


def _as_dtype(array: np.ndarray, dtype_name: str) -> np.ndarray:
    want = dtypes.from_name(dtype_name).np
    return array if array.dtype == want else array.astype(want)


BATCH_ADAPTED_OPS = ("reshape", "expand", "slice_backward", "slice")  # ops whose attributes may hold the batch size


def batch_adapted_attrs(node: Node, traced_in: tuple, actual_in: tuple, batch) -> dict:
    """``node``'s attributes for a run at batch size ``batch`` whose first input has shape
    ``actual_in`` (traced as ``traced_in``): what the ONNX lowering computes at run time."""
    if node.op == "slice":  # starts/ends along the batch (x[1:], x[:B // 2])
        if batch is None:
            return node.attrs
        adapted = dict(node.attrs)
        for key in ("starts", "ends"):
            if node.batch.get(key):
                at = batch_dims_at(node.batch, key, batch)
                adapted[key] = [at.get(i, v) for i, v in enumerate(node.attrs[key])]
        return adapted
    batch_at = node.batch.get("shape", ()) if batch is not None else ()
    dims = batch_dims_at(node.batch, "shape", batch) if batch_at else {}  # position -> its size at this batch
    if node.op == "slice_backward" and batch_at and all(s == 1 for s in node.attrs["steps"]):
        shape = list(node.attrs["shape"])  # padding (ONNX Pad) leaves the batch dim as it comes
        for i in batch_at:
            shape[i] = dims[i]
        return {**node.attrs, "shape": shape}
    if node.op not in ("reshape", "expand"):
        return node.attrs
    if traced_in == actual_in and all(node.attrs["shape"][i] == dims[i] for i in batch_at):
        return node.attrs
    adapt = dynamic_reshape if node.op == "reshape" else dynamic_expand
    return {**node.attrs, "shape": adapt(traced_in, actual_in, node.attrs["shape"], batch_at, batch, dims)}


def reshape_target(in_shape: tuple, out_shape, batch_at=()) -> list[int]:
    """The batch-independent form of a traced reshape: leading dims that match the input
    are copied (``0``); if none are and the input's first dim was merged, it becomes -1.
    Positions ``batch_at`` hold the batch size itself (``view(B, T, C)``): the caller puts
    the run-time batch there, so no -1 is needed."""
    target = list(out_shape)
    copied = 0
    while copied < min(len(in_shape), len(target)) and in_shape[copied] == target[copied]:
        target[copied] = 0
        copied += 1
    if in_shape and copied == 0 and target and -1 not in target and in_shape[0] != 1 and not batch_at:
        target[0] = -1
    return target


def dynamic_reshape(traced_in: tuple, actual_in: tuple, out_shape, batch_at=(), batch=None,
                    dims=None) -> list[int]:
    """``out_shape`` (traced for input ``traced_in``) re-derived for input ``actual_in``;
    ``dims``: position -> size at this batch where it is an expression of it (``B * T``)."""
    target = reshape_target(traced_in, out_shape, batch_at)
    resolved = [actual_in[i] if d == 0 else d for i, d in enumerate(target)]
    for i in batch_at:
        if target[i] != 0:
            resolved[i] = (dims or {}).get(i, batch)
    if -1 not in resolved and int(np.prod(resolved)) != int(np.prod(actual_in)):
        raise ShapeError(f"reshape expected an input of shape {traced_in} (traced), got {actual_in}: "
                         f"the target {list(out_shape)} does not depend on the batch size")
    return resolved


def dynamic_expand(traced_in: tuple, actual_in: tuple, out_shape, batch_at=(), batch=None,
                   dims=None) -> list[int]:
    """Expand target dims that equalled a (non-1) input dim follow the actual input; positions
    ``batch_at`` (``expand(x.shape[0], -1)``) take the actual batch size (or, per ``dims``, the
    expression of it they hold)."""
    shape = list(out_shape)
    offset = len(shape) - len(traced_in)
    for j, (t, a) in enumerate(zip(traced_in, actual_in)):
        if t != 1 and shape[offset + j] == t:
            shape[offset + j] = a
    for i in batch_at:
        shape[i] = (dims or {}).get(i, batch)
    return shape
