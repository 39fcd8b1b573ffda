"""``flowserve.nn.Graph`` and its companions ``GraphConfig`` and ``GraphModule``."""

from flowserve.nn.graph.config import GraphConfig  # noqa: F401
from flowserve.nn.graph.graph import Graph  # noqa: F401
from flowserve.nn.graph.proxy import GraphModule  # noqa: F401
