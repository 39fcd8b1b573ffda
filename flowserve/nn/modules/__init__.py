from flowserve.nn.modules.activation import LogSoftmax, ReLU, Sigmoid, Softmax, Tanh  # noqa: F401
from flowserve.nn.modules.container import ModuleDict, ModuleList, Sequential  # noqa: F401
from flowserve.nn.modules.linear import Flatten, Identity, Linear  # noqa: F401
from flowserve.nn.modules.loss import CrossEntropyLoss, L1Loss, MSELoss, NLLLoss, _Loss  # noqa: F401
