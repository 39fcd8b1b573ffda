"""Reverse-mode autodiff over the tape ``bind`` records: one short, iterative walk.

The same walk serves eager tensors (gradients land in ``.grad`` of leaves) and lazy
tensors inside ``nn.Graph.build`` (the vjp rules are flowserve ops, so their calls are
recorded into the graph, giving the symbolic backward).
"""

from __future__ import annotations

from flowserve.errors import AutogradError
from flowserve.autograd.tape import TapeNode
from flowserve.ops.registry import current_interpreter, pop_interpreter, push_interpreter


def _topological_order(root: TapeNode) -> list[TapeNode]:
    """Nodes reachable from ``root``, each before the nodes that produced its inputs."""
    order, visited, stack = [], set(), [(root, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for parent in node.parents:
            if parent is not None and parent[0] is not None and id(parent[0]) not in visited:
                stack.append((parent[0], False))
    order.reverse()  # post-order has producers first; reversed, consumers come first
    return order


def _accumulate(store: dict, key, grad):
    prev = store.get(key)
    store[key] = grad if prev is None else prev + grad


def backward(root, gradient=None) -> None:
    """Compute d(root)/d(leaf) for every leaf that requires grad, adding it to ``leaf.grad``."""
    from flowserve.ops import functional as F

    if not root.requires_grad:
        raise AutogradError("element 0 of tensors does not require grad and does not have a grad_fn")
    if gradient is None:
        if root.numel() != 1:
            raise AutogradError(
                f"grad can be implicitly created only for scalar outputs, got size {tuple(root.shape)}")
        gradient = F.expand(F.scalar_tensor(1, root.dtype, root.device), root.shape)
    elif not hasattr(gradient, "_dtype"):
        gradient = F.as_tensor(gradient, root)
    token = push_interpreter(current_interpreter().with_grad(False))
    try:
        if root._node is None:
            _to_leaf(root, gradient)
            return
        grads = {(id(root._node), root._out_index): gradient}
        for node in _topological_order(root._node):
            _apply_vjp(node, grads)
    finally:
        pop_interpreter(token)


def _apply_vjp(node: TapeNode, grads: dict) -> None:
    outs = [grads.pop((id(node), i), None) for i in range(len(node.outputs))]
    if all(g is None for g in outs):
        return
    if len(outs) == 1:
        in_grads = node.prim.vjp(node, outs[0])
    else:
        in_grads = node.prim.vjp(node, *outs)
    for parent, x, g in zip(node.parents, node.inputs, in_grads):
        if parent is None or g is None:
            continue
        if tuple(g.shape) != tuple(x.shape):
            g = g.sum_to(x.shape)
        producer, index, tensor = parent
        if producer is None:
            _to_leaf(tensor, g)
        else:
            _accumulate(grads, (id(producer), index), g)


def _to_leaf(leaf, g) -> None:
    if g.dtype is not leaf.dtype:
        g = g.to(leaf.dtype)
    leaf.grad = g if leaf.grad is None else leaf.grad + g


def grad(outputs, inputs, grad_outputs=None):
    """``flow.autograd.grad(y, [x])``: gradients of ``outputs`` w.r.t. ``inputs`` without
    touching ``.grad``."""
    single = not isinstance(inputs, (list, tuple))
    inputs = [inputs] if single else list(inputs)
    saved = [x.grad for x in inputs]
    for x in inputs:
        x.grad = None
    try:
        backward(outputs, grad_outputs)
        result = [x.grad for x in inputs]
    finally:
        for x, g in zip(inputs, saved):
            x.grad = g
    return result[0] if single else tuple(result)
