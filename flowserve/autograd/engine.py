"""Reverse-mode autodiff over the tape: one core, ``gradients``, and two thin wrappers,
``backward`` (adds to ``.grad`` of leaves) and ``grad`` (returns gradients, touches no
``.grad``), with PyTorch's semantics for ``retain_graph``, ``create_graph`` and hooks.

The walk is iterative and deterministic. The same walk serves eager tensors and lazy
tensors inside ``nn.Graph.build``: the vjp rules are flowserve ops, so inside a trace their
calls are recorded into the graph, giving the symbolic backward.
"""

from __future__ import annotations

from contextvars import ContextVar

from flowserve.autograd.tape import TapeNode
from flowserve.dispatch import current_interpreter, current_trace, pop_interpreter, push_interpreter
from flowserve.errors import AutogradError

_HOOKS: ContextVar[tuple] = ContextVar("flowserve_backward_hooks", default=())


def queue_backward_hooks(hooks) -> None:
    """Call ``hooks.finished()`` once the next eager ``backward()`` has set every ``.grad``
    (``DistributedDataParallel`` averages the gradients there)."""
    queued = _HOOKS.get()
    if hooks not in queued:
        _HOOKS.set(queued + (hooks,))

def _topological_order(roots: list[TapeNode]) -> list[TapeNode]:
    """Nodes reachable from ``roots``, each before the nodes that produced its inputs."""
    order, visited = [], set()
    stack = [(root, False) for root in reversed(roots)]
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


class _Walk:
    """One backward pass: gradients per (node, output index) and per leaf."""

    def __init__(self, create_graph: bool):
        self.create_graph = create_graph
        self.grads: dict = {}  # (id(node), output index) -> gradient
        self.leaves: dict = {}  # id(leaf) -> (leaf, gradient)
        self.captured: dict = {}  # (id(node), output index) -> gradient, for non-leaf inputs
        self.wanted: set = set()  # keys whose gradient the caller asked for

    def seed(self, output, seed) -> None:
        if output._node is None:
            self.to_leaf(output, seed)
        else:
            _accumulate(self.grads, (id(output._node), output._out_index), seed)

    def to_leaf(self, leaf, g) -> None:
        entry = self.leaves.get(id(leaf))
        self.leaves[id(leaf)] = (leaf, g if entry is None else entry[1] + g)

    def visit(self, node: TapeNode) -> None:
        outs = [self.grads.pop((id(node), i), None) for i in range(node.n_outputs)]
        for i, g in enumerate(outs):
            if g is not None and node.hooks is not None:
                outs[i] = g = _run_hooks(node.hooks.get(i, {}).values(), g)
            if (id(node), i) in self.wanted:
                self.captured[(id(node), i)] = g
        if all(g is None for g in outs):
            return
        ctx = node.context(self.create_graph)
        in_grads = node.prim.vjp(ctx, *outs) if len(outs) > 1 else node.prim.vjp(ctx, outs[0])
        for parent, shape, g in zip(node.parents, node.shapes(), in_grads):
            if parent is None or g is None:
                continue
            if tuple(g.shape) != shape:
                g = g.sum_to(shape)
            producer, index, tensor = parent
            if producer is None:
                self.to_leaf(tensor, g)
            else:
                _accumulate(self.grads, (id(producer), index), g)

    def leaf_gradient(self, leaf):
        entry = self.leaves.get(id(leaf))
        if entry is None:
            return None
        g = _run_hooks(getattr(leaf, "_hooks", {}).values(), entry[1])
        return g if g.dtype is leaf.dtype else g.to(leaf.dtype)


def _run_hooks(hooks, g):
    for hook in list(hooks or ()):
        result = hook(g)
        if result is not None:
            g = result
    return g


def _as_seed(output, seed):
    if seed is None:
        if output.numel() != 1:
            raise AutogradError(
                f"grad can be implicitly created only for scalar outputs, got size {tuple(output.shape)}")
        one = output._wrap(output.device.xp.ones((), dtype=output.dtype.np), output.device)
        return one.expand(output.shape)  # ones, kept 0-d where traced (batch-size independent)
    if not hasattr(seed, "_dtype"):
        seed = output.new_tensor(seed)
    if tuple(seed.shape) != tuple(output.shape):
        raise AutogradError(f"Mismatch in shape: grad_output has a shape of {tuple(seed.shape)} and "
                            f"output has a shape of {tuple(output.shape)}")
    return seed


def gradients(outputs, seeds, inputs=None, *, retain_graph: bool = False,
              create_graph: bool = False) -> dict:
    """The core: the gradient of ``sum_i <seeds[i], outputs[i]>`` w.r.t. each tensor in
    ``inputs`` (leaves or intermediate results), or w.r.t. every leaf that requires grad
    when ``inputs`` is None, as ``{tensor: gradient or None}``. Touches no ``.grad``.

    ``seeds[i]`` None means ones (scalar outputs only). Without ``retain_graph`` the walked
    graph is freed; with ``create_graph`` the gradients carry history for higher order.

    >>> import flowserve as flow
    >>> x = flow.tensor([1.0, 2.0], requires_grad=True)
    >>> gradients([(x * x).sum()], [None], [x])[x]
    tensor([2., 4.], dtype=flowserve.float32)
    """
    walk = _Walk(create_graph)
    for output, seed in zip(outputs, seeds):
        if not output.requires_grad:
            raise AutogradError("element 0 of tensors does not require grad and does not have a grad_fn")
        walk.seed(output, _as_seed(output, seed))
    targets = list(inputs) if inputs is not None else None
    walk.wanted = {(id(x._node), x._out_index) for x in targets or () if x._node is not None}
    nodes = _topological_order([o._node for o in outputs if o._node is not None])
    token = push_interpreter(current_interpreter().with_grad(create_graph))
    try:
        for node in nodes:
            walk.visit(node)
    finally:
        pop_interpreter(token)
    if not retain_graph:
        for node in nodes:
            node.free()
    if targets is None:
        return {leaf: walk.leaf_gradient(leaf) for leaf, _ in walk.leaves.values()}
    return {x: walk.leaf_gradient(x) if x._node is None else walk.captured.get((id(x._node), x._out_index))
            for x in targets}


def backward(tensors, grad_tensors=None, retain_graph: bool | None = None, create_graph: bool = False,
             inputs=None) -> None:
    """``flow.autograd.backward(loss)``: add d(tensors)/d(leaf) to ``leaf.grad`` for every
    leaf that requires grad (or only those in ``inputs``)."""
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if grad_tensors is None or not isinstance(grad_tensors, (list, tuple)):
        grad_tensors = [grad_tensors] * len(tensors)
    retain = create_graph if retain_graph is None else retain_graph
    if inputs is not None and not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    hooks = ()
    if current_trace() is None:  # (a graph's traced backward is not the eager pass they wait for)
        hooks = _HOOKS.get()
        _HOOKS.set(())
    found = gradients(tensors, grad_tensors, inputs, retain_graph=retain, create_graph=create_graph)
    for leaf, g in found.items():
        if g is not None:
            leaf.grad = g if leaf.grad is None else leaf.grad + g
    for h in hooks:
        h.finished()


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None, create_graph: bool = False,
         allow_unused: bool = False) -> tuple:
    """``flow.autograd.grad(y, [x])``: a tuple with d(outputs)/d(input) per input, leaving
    every ``.grad`` as it was (PyTorch's ``torch.autograd.grad``).

    >>> import flowserve as flow
    >>> x = flow.tensor([1.0, 2.0], requires_grad=True)
    >>> flow.autograd.grad((x * x).sum(), x)
    (tensor([2., 4.], dtype=flowserve.float32),)
    """
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if grad_outputs is None or not isinstance(grad_outputs, (list, tuple)):
        grad_outputs = [grad_outputs] * len(outputs)
    for x in inputs:
        if not x.requires_grad:
            raise AutogradError("One of the differentiated Tensors does not require grad")
    retain = create_graph if retain_graph is None else retain_graph
    found = gradients(outputs, grad_outputs, inputs, retain_graph=retain, create_graph=create_graph)
    result = tuple(found[x] for x in inputs)
    if not allow_unused and any(g is None for g in result):
        raise AutogradError("One of the differentiated Tensors appears to not have been used in the graph. "
                            "Set allow_unused=True if this is the desired behavior.")
    return result
