"""IR -> ONNX: lower every node through its lowering (``LOWERINGS.for_op``, the one lookup),
then rewrite the built nodes for the target (clips, channel affines, slices as ``Split``,
a training step's weight gradients, steps and state outputs: ``lowering/training.py``)."""

from __future__ import annotations

import numpy as np
import onnx

from flowserve import dtypes
from flowserve.errors import ExportError
from flowserve.ir.graph import GraphIR, Node, Value
from flowserve.onnx_backend import versions
from flowserve.onnx_backend.builder import Builder, onnx_dtype
from flowserve.onnx_backend.lowering import LOWERINGS, LoweringContext, training
from flowserve.onnx_backend.lowering.affine import fold_channel_affine, fold_channel_scale_shift
from flowserve.onnx_backend.lowering.clip import fold_clip
from flowserve.onnx_backend.lowering.scalars import full_rank_scalars
from flowserve.onnx_backend.lowering.split import merge_slices_into_split

UPDATE_SUFFIX = ":new"


def _batch_shape(shape, batch: int | None, named: dict | None = None) -> list:
    """``shape`` with dim 0 symbolic (-1: ``batch``) where it is the batch, and the dims in
    ``named`` (axis -> name, ``flow.save(..., dynamic_dims=...)``) symbolic by their names."""
    shape = list(shape)
    if batch is not None and shape and shape[0] == batch:
        shape[0] = -1
    for axis, name in (named or {}).items():
        shape[int(axis)] = name
    return shape


def _cast_output(b: Builder, name: str, dtype: str) -> None:
    """Output ``name`` given as ``dtype``: what computed it now writes ``name:raw``, cast to ``name``."""
    raw = f"{name}:raw"
    for node in b.nodes:
        if node.name == name:
            node.name = raw
        for i, o in enumerate(node.output):
            if o == name:
                node.output[i] = raw
        for i, o in enumerate(node.input):
            if o == name:
                node.input[i] = raw
    b.op("Cast", [raw], [name], to=onnx_dtype(dtype))


def _widen_bfloat16(ir: GraphIR) -> GraphIR:
    """ONNX Runtime's CPU provider has no bfloat16 kernels but ``Cast``: every other node that
    reads or writes bfloat16 (``flow.autocast``'s tensors, their gradients' sums) reads its
    inputs as float32 (exactly), computes in float32 and rounds its results to bfloat16, which
    is what eager mode's bfloat16 arithmetic does (one rounding per op)."""
    if not any(v.dtype == "bfloat16" for v in ir.values.values()):
        return ir
    ir = ir.copy()
    nodes = []
    for node in ir.nodes:
        if node.op == "cast" or all(ir.values[n].dtype != "bfloat16" for n in node.inputs + node.outputs):
            nodes.append(node)
            continue
        inputs, back = [], []
        for name in node.inputs:
            wide = f"{name}:f32"
            if ir.values[name].dtype == "bfloat16" and wide not in ir.values:
                ir.add_value(Value(wide, ir.values[name].shape, "float32"))
                nodes.append(Node("cast", [name], [wide], {"dtype": "float32"}, node.scope, node.loc))
            inputs.append(wide if ir.values[name].dtype == "bfloat16" else name)
        outputs = []
        for name in node.outputs:
            if ir.values[name].dtype == "bfloat16":
                ir.add_value(Value(f"{name}:f32", ir.values[name].shape, "float32"))
                back.append(Node("cast", [f"{name}:f32"], [name], {"dtype": "bfloat16"}, node.scope, node.loc))
                name = f"{name}:f32"
            outputs.append(name)
        nodes.append(Node(node.op, inputs, outputs, dict(node.attrs), node.scope, node.loc, dict(node.batch)))
        nodes.extend(back)
    ir.nodes = nodes
    return ir


def lower_ir(ir: GraphIR, baked: dict, *, state_inputs=(), state_outputs=(), dynamic_batch: bool = False,
             opset: int = versions.DEFAULT_OPSET, lowerings: dict | None = None,
             nchwc_block: int = 0, cpu_provider: bool = False, batch_norm_kernel: bool = True,
             dynamic_dims: dict | None = None, cuda_provider: bool = False) -> onnx.ModelProto:
    """An ONNX model of ``ir``.

    ``baked``: state name -> array, written as initializers (parameters of inference graphs,
    constants). ``state_inputs``: state fed per call. ``state_outputs``: state whose new
    value (``ir.updates``) is returned as output ``<name>:new``. ``dynamic_batch``: dim 0 of
    the inputs (and of outputs of the same size) becomes the symbolic ``batch`` axis.
    ``lowerings``: extra op name -> lowering, consulted first (the exporter's fused groups;
    ``Lowerings.for_op`` decides the order).
    ``nchwc_block``: ONNX Runtime's NCHWc channel block, for graph mode on its CPU provider
    only (``flowserve.onnx_backend.lowering.conv``): eligible convolutions become
    ``com.microsoft.nchwc`` operators, which no other engine runs; 0 (the default) keeps
    the model standard ONNX. ``cpu_provider``: graph mode runs the model on ONNX Runtime's
    CPU provider (standard operators in the formulations it runs fastest); there
    ``batch_norm_kernel`` lowers training batch norm as its training-mode
    ``BatchNormalization`` (``flowserve.onnx_backend.lowering.norm``), and per-channel
    ``x * s + c`` is one inference-mode ``BatchNormalization``
    (``flowserve.onnx_backend.lowering.affine``). ``dynamic_dims``:
    input or output name -> {axis: dim name}, dims written as those named ``dim_param``s.
    ``cuda_provider``: graph mode runs the model on ONNX Runtime's CUDA provider (each node a
    kernel launch: the formulations with the fewest nodes, consecutive slices as one ``Split``,
    ``flowserve.onnx_backend.lowering.split``).
    """
    ir = _widen_bfloat16(ir)
    b = Builder(opset)
    batch = ir.inputs[0].shape[0] if dynamic_batch and ir.inputs and ir.inputs[0].shape else None
    for v in ir.inputs:
        b.input(v.name, v.dtype, _batch_shape(v.shape, batch, (dynamic_dims or {}).get(v.name)))
    for name in state_inputs:
        v = ir.state[name]
        b.input(name, v.dtype, v.shape)
    for name, array in baked.items():
        b.initializer(name, np.asarray(array))
    ctx = LoweringContext(ir, b, dynamic_batch, nchwc_block, cpu_provider, batch_norm_kernel, cuda_provider)
    for node in ir.nodes:
        lower = LOWERINGS.for_op(node.op, lowerings)
        if lower is None:
            raise ExportError(f"op {node.op!r} (node {node.outputs[0]!r} in scope {node.scope!r}) has no ONNX lowering")
        lower(b, node, ctx)
    for v in ir.outputs:
        dtype = dtypes.session_dtype(v.dtype)  # flow.autocast's bfloat16 results leave as float32
        if dtype != v.dtype:  # and the graph casts them back
            _cast_output(b, v.name, dtype)
        b.output(v.name, dtype, _batch_shape(v.shape, batch, (dynamic_dims or {}).get(v.name)))
    user_outputs = {v.name for v in ir.outputs}
    updates = {name: ir.updates[name] for name in state_outputs}
    fold_clip(b, keep=user_outputs | set(updates.values()))
    if cpu_provider:
        fold_channel_affine(b, ir.values, keep=user_outputs | set(updates.values()))
        fold_channel_scale_shift(b, ir.values, keep=user_outputs | set(updates.values()))
    if cuda_provider:
        merge_slices_into_split(b, ir.values)
    if updates and training.fuse_weight_gradient_gemms(b, keep=user_outputs | set(updates.values())):
        still_read = {n for node in b.nodes for n in node.input} | user_outputs | set(updates.values())
        b.drop_initializers([n for n in b.initializers if n not in still_read])  # the momenta's factors
    if updates:
        training.subtract_negated_steps(b, keep=user_outputs | set(updates.values()))
    if cpu_provider:
        full_rank_scalars(b, ir.values, keep=user_outputs | set(updates.values()))
    for name, out in zip(updates, training.write_state_outputs(b, updates, user_outputs, UPDATE_SUFFIX)):
        v = ir.state[name]
        b.output(out, v.dtype, v.shape)
    return b.model(ir.name)
