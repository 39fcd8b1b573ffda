"""``flowserve.nn.Graph`` and its companions ``GraphConfig``, ``GraphModule`` and
``GraphTensor`` (what ``graph.model.to(GraphModule)`` and ``graph.model.weight.to(GraphTensor)``
give), ``Proxy`` (the class of ``graph.model`` and ``graph.model.weight``)."""

from flowserve.nn.graph.config import GraphConfig  # noqa: F401
from flowserve.nn.graph.graph import Graph  # noqa: F401
from flowserve.nn.graph.proxy import GraphModule, GraphTensor, Proxy  # noqa: F401
