"""``flow.fx``: OneFlow's ``torch.fx``-style symbolic tracing of a module into a ``Graph`` of
``Node`` s, a ``GraphModule`` that runs it, and the ``wrap`` hook that model files call at import.

``symbolic_trace(module)`` runs ``module.forward`` on ``Proxy`` objects instead of tensors
(no example input is needed) and records what it does: each input is a ``placeholder`` node,
each call of a built-in ``flowserve.nn`` module a ``call_module`` node, each ``flowserve``,
``flowserve.nn.functional`` or ``flowserve._C`` function a ``call_function`` node, each tensor method a
``call_method`` node, each parameter or buffer read a ``get_attr`` node, the result the
``output`` node. The ``GraphModule`` it returns holds the traced module's submodules,
parameters and buffers (the same objects), shows the Python code generated from the graph
as ``.code``, and computes what the module computes, eagerly or inside an ``nn.Graph``.

As in ``torch.fx``, tracing cannot see values: Python control flow on a traced value (``if
x.sum() > 0``) raises ``TraceError``, and a function reached by another name than
``flow.<name>``, ``F.<name>`` or ``flow._C.<name>`` (``from flowserve import cat``) is not
recorded.

>>> import flowserve as flow
>>> class M(flow.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.linear = flow.nn.Linear(4, 3)
...     def forward(self, x):
...         return flow.relu(self.linear(x)) + 1
>>> gm = flow.fx.symbolic_trace(M())
>>> [n.op for n in gm.graph.nodes]
['placeholder', 'call_module', 'call_function', 'call_function', 'output']
>>> print(gm.code.strip())
def forward(self, x):
    linear = self.linear(x)
    relu = flowserve.relu(linear)
    add = relu + 1
    return add

``replace_pattern(gm, pattern, replacement)`` rewrites each occurrence of a traced pattern
(``flowserve.fx.rewrite``). The modules: ``graph`` (``Node``, ``Graph``, ``GraphModule``),
``tracer`` (``Proxy``, ``Tracer``, ``symbolic_trace``), ``rewrite``.

``wrap`` (``torch.fx.wrap("stochastic_depth")`` in torchvision) marks a function as a leaf:
flowserve's ``nn.Graph`` traces every function through, so it returns its argument unchanged.
"""

from __future__ import annotations

from flowserve._missing import module_getattr as _module_getattr
from flowserve.fx.graph import Graph, GraphModule, Node, TraceError
from flowserve.fx.rewrite import Match, replace_pattern
from flowserve.fx.tracer import Attribute, Proxy, Tracer, symbolic_trace, wrap

__all__ = ["Attribute", "Graph", "GraphModule", "Match", "Node", "Proxy", "TraceError", "Tracer", "replace_pattern",
           "symbolic_trace", "wrap"]

__getattr__ = _module_getattr("flowserve.fx")  # torch.jit.script and the rest: what to use instead
