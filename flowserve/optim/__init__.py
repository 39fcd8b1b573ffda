"""``flowserve.optim``: optimizers whose update nn.Graph compiles into the training graph,
and learning-rate schedulers (``flowserve.optim.lr_scheduler``)."""

from flowserve.optim import lr_scheduler  # noqa: F401
from flowserve.optim.adam import Adam, AdamW  # noqa: F401
from flowserve.optim.optimizer import Optimizer  # noqa: F401
from flowserve.optim.rmsprop import Adagrad, RMSprop  # noqa: F401
from flowserve.optim.sgd import SGD  # noqa: F401
