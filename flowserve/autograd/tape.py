"""The autograd tape: one ``TapeNode`` per differentiable op recorded while grad mode is on.

Interpreters call ``record`` after running or tracing a primitive; the backward core in
``flowserve.autograd.engine`` walks the nodes. Nothing here knows ``Tensor`` or the ops:
a node holds detached aliases of its inputs and outputs (no reference cycle through the
outputs) and, per input, where that input's gradient goes: its producing node and output
index, or the leaf tensor itself.
"""

from __future__ import annotations

from flowserve.errors import AutogradError

FREED = ("Trying to backward through the graph a second time (or directly access saved tensors after "
         "they have already been freed). Saved intermediate values of the graph are freed when you call "
         ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
         "graph a second time or if you need to access saved tensors after calling backward.")


class TapeNode:
    """One recorded op: what its vjp needs, and where each input's gradient goes."""

    __slots__ = ("prim", "attrs", "inputs", "outputs", "parents", "n_outputs", "hooks", "freed")

    def __init__(self, prim, attrs, inputs, outputs, parents):
        self.prim = prim
        self.attrs = attrs
        self.inputs = inputs
        self.outputs = outputs
        self.parents = parents
        self.n_outputs = len(outputs)
        self.hooks = None  # output index -> hooks of that (non-leaf) output, see add_hook
        self.freed = None  # (inputs, outputs) as FreedValue once the saved values are freed

    def needs(self, i: int) -> bool:
        """Whether input ``i`` wants a gradient (vjp rules skip the others)."""
        return self.parents[i] is not None

    def name(self) -> str:
        return f"{self.prim.name}Backward"

    def free(self) -> None:
        """Drop the saved values (``retain_graph=False``): a later walk through this node
        works only if its vjp needs none of them, as in PyTorch."""
        if self.inputs is not None:
            self.freed = (tuple(map(FreedValue, self.inputs)), tuple(map(FreedValue, self.outputs)))
            self.inputs = self.outputs = None

    def shapes(self) -> tuple:
        """The shapes of the inputs (known after ``free`` too)."""
        inputs = self.freed[0] if self.inputs is None else self.inputs
        return tuple(tuple(x.shape) for x in inputs)

    def context(self, create_graph: bool):
        """What the vjp rule reads: this node, its values with history (``create_graph``),
        or, once freed, a view whose saved values raise PyTorch's error."""
        if self.inputs is None:
            return FreedNode(self)
        return self.with_history() if create_graph else self

    def with_history(self) -> "TapeNode":
        """This node with saved values that keep their autograd history (for
        ``create_graph``): inputs link to their producers or are the leaves themselves,
        outputs link to this node, so vjp ops on them are differentiable again."""
        inputs = tuple(x if parent is None else (_unchanged_leaf(parent[2], x) if parent[0] is None
                                                 else linked(x, *parent[:2]))
                       for x, parent in zip(self.inputs, self.parents))
        outputs = tuple(linked(y, self, i) if y._dtype.is_floating_point else y
                        for i, y in enumerate(self.outputs))
        return TapeNode(self.prim, self.attrs, inputs, outputs, self.parents)

    def __repr__(self) -> str:
        return f"<{self.name()}>"


class FreedValue:
    """A saved value after ``free``: its shape, dtype and device remain (a vjp such as
    ``sum``'s needs only those, as PyTorch keeps sizes); anything else raises."""

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, value):
        self.shape, self.dtype, self.device = tuple(value.shape), value.dtype, value.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getattr__(self, name: str):
        raise AutogradError(FREED)


class FreedNode:
    """A freed node as its vjp sees it: attributes and value metadata as before."""

    __slots__ = ("node",)

    def __init__(self, node: TapeNode):
        self.node = node

    @property
    def attrs(self):
        return self.node.attrs

    def needs(self, i: int) -> bool:
        return self.node.needs(i)

    @property
    def inputs(self) -> tuple:
        return self.node.freed[0]

    @property
    def outputs(self) -> tuple:
        return self.node.freed[1]


def _unchanged_leaf(leaf, saved):
    """The leaf itself, for a second-order graph; refused if an in-place update changed it
    since the op saw it (its history would then describe another value)."""
    if leaf._data is not saved._data or leaf._lazy is not saved._lazy:
        raise AutogradError(
            "one of the variables needed for gradient computation has been modified by an inplace "
            f"operation: a leaf of size {tuple(leaf.shape)} changed after {saved.dtype} values were "
            "saved; create_graph=True needs the value each op saw")
    return leaf


def linked(value, node: TapeNode, index: int):
    """An alias of ``value`` whose gradient flows to output ``index`` of ``node``."""
    t = value._alias()
    t._requires_grad, t._node, t._out_index = True, node, index
    return t


def record_if_wanted(prim, inputs, outputs, attrs) -> None:
    """``record`` when an input requires grad (the caller checked grad mode)."""
    for t in inputs:
        if t._requires_grad:
            record(prim, inputs, outputs, attrs)
            return


def record(prim, inputs, outputs, attrs) -> None:
    """Attach a node for ``prim`` to its floating point ``outputs`` (list comprehensions,
    not generators: this runs on every op that records)."""
    parents = tuple([(t._node, t._out_index, t) if t._requires_grad else None for t in inputs])
    node = TapeNode(prim, attrs, tuple([t._alias() for t in inputs]), tuple([t._alias() for t in outputs]),
                    parents)
    for i, out in enumerate(outputs):
        if out._dtype.is_floating_point:
            out._requires_grad = True
            out._node = node
            out._out_index = i


class RemovableHandle:
    """What ``Tensor.register_hook`` returns: ``handle.remove()`` unregisters the hook."""

    def __init__(self, hooks: dict, hook):
        self._hooks = hooks
        hooks[self] = hook  # keyed by the handle: insertion order is call order

    def remove(self) -> None:
        self._hooks.pop(self, None)


def add_hook(tensor, hook) -> RemovableHandle:
    """Call ``hook(grad)`` whenever the gradient of ``tensor`` is computed; a hook that
    returns a tensor replaces the gradient (PyTorch's ``Tensor.register_hook``)."""
    node = tensor._node
    if node is None:
        hooks = getattr(tensor, "_hooks", None)
        if hooks is None:
            hooks = tensor._hooks = {}
    else:
        if node.hooks is None:
            node.hooks = {}
        hooks = node.hooks.setdefault(tensor._out_index, {})
    return RemovableHandle(hooks, hook)
