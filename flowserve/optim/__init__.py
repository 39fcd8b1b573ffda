"""``flowserve.optim``: optimizers whose update nn.Graph compiles into the training graph."""

from flowserve.optim.optimizer import Optimizer  # noqa: F401
from flowserve.optim.sgd import SGD  # noqa: F401
