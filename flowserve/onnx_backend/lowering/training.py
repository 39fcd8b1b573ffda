"""Rewrites of a lowered training step (graph mode) that save whole passes over memory.

- **State outputs without copies.** A state's new value is returned as ``<name>:new``.
  Where the node computing it can write that output itself (its value is not a graph
  input, an initializer, another output or the new value of a second state), its output
  is renamed instead of copied by an ``Identity``; graph mode binds the output to the
  state's other buffer, so ONNX Runtime writes the update straight into it.
- **Linear weight gradients as one ``Gemm``.** ``nn.Linear`` multiplies by the weight's
  transpose, so autodiff gives ``dW = Transpose(MatMul(Transpose(x), g))``: two
  transposes and a copy of the whole gradient. It is ``Gemm(g, x, transA=1)``, the same
  products summed in the same order.
- **SGD momentum inside that ``Gemm``.** ``Add(Mul(v, mu), dW)`` with a constant
  ``mu`` is ``Gemm(g, x, v, transA=1, beta=mu)``: ``v * mu`` is added to the product as
  it is written instead of in two more passes over the weight (the product is rounded
  once before the sum either way; fused multiply-adds may round ``v * mu + p`` once).
"""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper


def _uses(b) -> dict:
    uses: dict = {}
    for node in b.nodes:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    return uses


def _scalar(b, name: str):
    tensor = b.initializers.get(name)
    if tensor is None:
        return None
    array = numpy_helper.to_array(tensor)
    if array.size != 1 or array.dtype.kind != "f":
        return None
    value = float(array.reshape(()))
    # Gemm's beta is a float32 attribute: a float64 mu it cannot hold exactly stays a Mul
    return value if float(np.float32(value)) == value else None


def _attr(node, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _is_2d_transpose(node) -> bool:
    return node is not None and node.op_type == "Transpose" and list(_attr(node, "perm", [])) == [1, 0]


def fuse_weight_gradient_gemms(b, keep: set) -> int:
    """Rewrite builder ``b``'s nodes in place (``keep``: names read outside the nodes).
    Returns how many weight gradients became one ``Gemm``."""
    producers = {out: node for node in b.nodes for out in node.output}
    uses = _uses(b)
    gemms, dropped = {}, set()
    for i, node in enumerate(b.nodes):  # Transpose(MatMul(Transpose(x), g)) -> Gemm(g, x, transA=1)
        if not _is_2d_transpose(node):
            continue
        matmul = producers.get(node.input[0])
        if matmul is None or matmul.op_type != "MatMul" or uses.get(matmul.output[0]) != 1 \
                or matmul.output[0] in keep:
            continue
        inner = producers.get(matmul.input[0])
        if not _is_2d_transpose(inner):
            continue
        x, g = inner.input[0], matmul.input[1]
        b.nodes[i] = helper.make_node("Gemm", [g, x], list(node.output), name=node.name, transA=1)
        gemms[node.output[0]] = b.nodes[i]
        dropped.add(id(matmul))
        if uses.get(inner.output[0]) == 1 and inner.output[0] not in keep:
            dropped.add(id(inner))
    fused = len(gemms)
    for i, node in enumerate(b.nodes):  # Add(Mul(v, mu), Gemm(...)) -> Gemm(..., v, beta=mu)
        if node.op_type != "Add" or id(node) in dropped:
            continue
        for grad_at in (0, 1):
            gemm = gemms.get(node.input[grad_at])
            scaled = producers.get(node.input[1 - grad_at])
            if gemm is None or len(gemm.input) != 2 or uses.get(gemm.output[0]) != 1 or gemm.output[0] in keep:
                continue
            if scaled is None or scaled.op_type != "Mul" or uses.get(scaled.output[0]) != 1 \
                    or scaled.output[0] in keep or not _same_shape(b, scaled.input[0], gemm):
                continue
            beta = _scalar(b, scaled.input[1])
            if beta is None:
                continue
            b.nodes[i] = helper.make_node("Gemm", [*gemm.input, scaled.input[0]], list(node.output), name=node.name,
                                          transA=1, beta=beta)
            dropped.update([id(gemm), id(scaled)])
            break
    b.nodes[:] = [node for node in b.nodes if id(node) not in dropped]
    return fused


def _same_shape(b, name: str, gemm) -> bool:
    """Whether graph input ``name`` (a state: the momentum) has the shape of ``gemm``'s
    output ``(g.shape[1], x.shape[1])``: Gemm's ``C`` must not broadcast."""
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
              for v in b.inputs}
    target = shapes.get(name)
    g, x = (shapes.get(n) for n in gemm.input)
    if target is None or len(target) != 2:
        return False
    if g is not None and x is not None:  # both fed: compare exactly
        return target == [g[1], x[1]]
    return None not in target  # the output has the state's (the weight's) shape by construction


def write_state_outputs(b, updates: dict, keep: set, suffix: str) -> list:
    """Name each state's new value ``<state><suffix>``: the node computing it writes that
    output directly where it may, else an ``Identity`` copies it. ``updates``: state ->
    the value holding its new content. Returns the output names, in ``updates``' order."""
    producers = {out: node for node in b.nodes for out in node.output}
    counts: dict = {}
    for value in updates.values():
        counts[value] = counts.get(value, 0) + 1
    fed = {v.name for v in b.inputs} | set(b.initializers)
    renames, outputs = {}, []
    for state, value in updates.items():
        out = state + suffix
        if value in producers and value not in fed and value not in keep and counts[value] == 1:
            renames[value] = out
        else:
            b.op1("Identity", [value], out)
        outputs.append(out)
    if renames:
        for node in b.nodes:
            for i, name in enumerate(node.input):
                if name in renames:
                    node.input[i] = renames[name]
            for i, name in enumerate(node.output):
                if name in renames:
                    node.output[i] = renames[name]
    return outputs
