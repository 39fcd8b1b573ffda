"""Add-to-output fusion (``config.allow_fuse_add_to_output(True)``): an add whose one
operand is a 2-D matmul's result, used nowhere else, is done by the matmul itself
(ONNX ``Gemm``: ``y = x @ w + c``), so the product is written once, with the addend.

The fused node's op is ``fused.AddToOutput``; the ONNX backend lowers it
(``flowserve.onnx_backend.lowering.graph_mode``). The pass runs on the private copy of the IR
that graph mode lowers, never on the IR a graph saves.
"""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, Node, PassResult

FUSED_OP = "fused.AddToOutput"


def _addend_fits(ir: GraphIR, addend: str, out: str) -> bool:
    a, y = ir.values[addend], ir.values[out]
    if a.dtype != y.dtype or y.dtype not in ("float32", "float16", "float64"):
        return False
    rows, cols = y.shape
    return tuple(a.shape) in ((cols,), (1, cols), (rows, cols), (rows, 1), (), (1,), (1, 1))


def fuse_add_to_output(ir: GraphIR) -> PassResult:
    producers, users = ir.producers(), ir.consumers()
    protected = {v.name for v in ir.outputs} | set(ir.updates.values())
    fused, drop = {}, set()
    for node in ir.nodes:
        if node.op != "add":
            continue
        for side in (0, 1):
            product = node.inputs[side]
            mm = producers.get(product)
            if mm is None or mm.op != "matmul" or id(mm) in drop or product in protected:
                continue
            x, w = mm.inputs
            if len(ir.values[x].shape) != 2 or len(ir.values[w].shape) != 2 or len(users.get(product, [])) != 1:
                continue
            addend = node.inputs[1 - side]
            if addend == product or not _addend_fits(ir, addend, node.outputs[0]):
                continue
            fused[id(node)] = Node(FUSED_OP, [x, w, addend], list(node.outputs), {}, node.scope, node.loc)
            drop.add(id(mm))
            break
    if not fused:
        return PassResult(ir, False)
    ir.nodes = [fused.get(id(n), n) for n in ir.nodes if id(n) not in drop]
    return PassResult(ir, True)

