"""``Tensor.backward``: the method face of ``flowserve.autograd.engine.backward``."""

from __future__ import annotations

from flowserve.autograd.engine import backward


class AutogradMethods:
    """Gradients from a tensor (the autograd metadata itself lives on ``Tensor``)."""

    __slots__ = ()

    def backward(self, gradient=None, retain_graph: bool | None = None, create_graph: bool = False,
                 inputs=None) -> None:
        """Add d(self)/d(leaf) to ``leaf.grad`` of every leaf that requires grad (PyTorch's
        ``Tensor.backward``: the graph is freed unless ``retain_graph``)."""
        backward(self, gradient, retain_graph, create_graph, inputs)
