"""One-element operands at the result's rank, for ONNX Runtime's CPU kernels.

ONNX Runtime 1.x's CPU kernels of the broadcasting operators step through the result one
element at a time where an operand holding one element has fewer dims than the result and
the result's last dim is 1; with that operand at the result's rank (every dim 1) they take
their scalar path. SGD's updates of pointwise convolution weights are such products
(``momentum * 0.9`` and ``* lr`` on a ``(1280, 320, 1, 1)`` momentum: 14-20 ms against
0.1 ms each, two threads; MobileNetV2 CIFAR has 34 such weights). The rewrite runs on the
lowered nodes of a graph for ONNX Runtime's CPU provider, after the rewrites that read
these operators' constants (``fold_clip``, the ``Gemm`` and ``Sub`` folds of
``flowserve.onnx_backend.lowering.training``): a constant operand becomes a constant of the
full rank, any other one a ``Reshape`` (one per operand and rank, shared by its readers).
Same values: the broadcast is the same.
"""

from __future__ import annotations

from onnx import helper, numpy_helper

BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "LessOrEqual",
                          "Greater", "GreaterOrEqual", "Where", "And", "Or", "Xor", "PRelu", "Mod"})


def _shape(b, metas: dict, name: str):
    """``name``'s shape where known (an IR value or an initializer), else None."""
    if name in b.initializers:
        return tuple(b.initializers[name].dims)
    meta = metas.get(name)
    return tuple(meta.shape) if meta is not None else None


def full_rank_scalars(b, metas: dict, keep: set) -> int:
    """Rewrite builder ``b``'s nodes in place; ``metas``: the IR's values (name -> shape and
    dtype); ``keep``: names read outside the nodes. Returns how many operands it gave the
    result's rank."""
    nodes, rewritten, replaced, reshaped = [], 0, set(), {}
    for node in b.nodes:
        out = _shape(b, metas, node.output[0]) if node.op_type in BROADCASTING else None
        if out and out[-1] == 1:
            ones = [1] * len(out)
            for i, name in enumerate(node.input):
                shape = _shape(b, metas, name)
                if shape is None or len(shape) >= len(out) or any(d != 1 for d in shape):
                    continue
                if name in b.initializers:
                    array = numpy_helper.to_array(b.initializers[name])
                    node.input[i] = b.const(array.reshape(ones), array.dtype)
                    replaced.add(name)
                elif (name, len(ones)) in reshaped:
                    node.input[i] = reshaped[name, len(ones)]
                else:
                    node.input[i] = reshaped[name, len(ones)] = b.fresh(f"{name}/full_rank")
                    nodes.append(helper.make_node("Reshape", [name, b.const(ones)], [node.input[i]],
                                                  name=node.input[i]))
                rewritten += 1
        nodes.append(node)
    b.nodes[:] = nodes
    still_read = {name for node in b.nodes for name in node.input}
    b.drop_initializers(replaced - still_read - keep)
    return rewritten
