"""``flowserve.nn``: modules, functional forms, initialisers and ``nn.Graph``."""

from flowserve.nn import functional, init  # noqa: F401
from flowserve.nn import utils  # noqa: F401
from flowserve.nn.module import Module  # noqa: F401
from flowserve.nn.modules import *  # noqa: F401,F403
from flowserve.nn.parameter import Parameter  # noqa: F401
from flowserve.nn.graph import Graph  # noqa: F401,E402
from flowserve.nn import parallel  # noqa: F401,E402

from flowserve._missing import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("flowserve.nn")  # PyTorch/OneFlow names flowserve lacks: say what to use instead
