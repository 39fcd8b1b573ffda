"""MatMul + bias (+ activation) -> one ``fused.Gemm`` (2-D input) or ``fused.MatMulBias``.

``nn.Linear`` traces to ``matmul(x, permute(W, [1, 0])) + b``; the transpose is absorbed
(``trans_b``), so the weight keeps its ``state_dict`` name as the initializer.
"""

from __future__ import annotations

from flowserve.exporter.passes.export_graph import ExportGraph, FusedGroup, fused_node
from flowserve.exporter.passes.act_match import activation_after
from flowserve.ir.graph import PassResult


def _weight(g: ExportGraph, name: str):
    """(weight name, trans_b, the permute node or None) for a constant 2-D right operand."""
    node = g.producer(name)
    if node is not None and node.op == "permute" and node.attrs["perm"] == [1, 0] \
            and (g.is_const(node.inputs[0]) or g.is_quantized_const(node.inputs[0])) and g.single_use(name):
        return node.inputs[0], 1, node
    if (g.is_const(name) or g.is_quantized_const(name)) and len(g.ir.values[name].shape) == 2:
        return name, 0, None
    return None


def _bias(g: ExportGraph, y: str, n_out: int):
    """The add node and bias name when ``y``'s only user adds a constant (n_out,) bias."""
    if not g.single_use(y):
        return None
    (add,) = g.users(y)
    if add.op != "add":
        return None
    other = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
    if not g.is_const(other) or tuple(g.ir.values[other].shape) not in ((n_out,), (1, n_out)):
        return None
    if g.ir.values[other].dtype != g.ir.values[y].dtype or tuple(g.ir.values[other].shape) != (n_out,):
        return None
    return add, other


def fuse_one(g: ExportGraph, matmul) -> bool:
    x, right = matmul.inputs
    found = _weight(g, right)
    if found is None or len(g.ir.values[x].shape) < 2:
        return False
    weight, trans_b, permute = found
    n_out = g.ir.values[weight].shape[0 if trans_b else 1]
    nodes = ([permute] if permute else []) + [matmul]
    inputs, y = [x, weight], matmul.outputs[0]
    bias = _bias(g, y, n_out)
    if bias is not None:
        nodes.append(bias[0])
        inputs.append(bias[1])
        y = bias[0].outputs[0]
    act = activation_after(g, y)
    if act is not None:
        nodes.extend(act[0])
        y = act[0][-1].outputs[0]
    if len(nodes) == 1:
        return False
    kind = "Gemm" if len(g.ir.values[x].shape) == 2 else "MatMulBias"
    attrs = {"trans_b": trans_b, "act": act[1] if act else None}
    group = FusedGroup(kind, matmul.scope, [n.op for n in nodes], y, ", ".join(
        p for p in ("transB" if trans_b else "", "bias" if bias else "", act[1] if act else "") if p))
    g.replace(nodes, fused_node(kind, inputs, [y], attrs, matmul), group)
    return True


def fuse_gemm(g: ExportGraph) -> PassResult:
    count = 0
    for node in list(g.ir.nodes):
        if node.op == "matmul" and node in g.ir.nodes and fuse_one(g, node):
            count += 1
    return PassResult(g, count > 0)
