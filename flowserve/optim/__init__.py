"""``flowserve.optim``: optimizers whose update nn.Graph compiles into the training graph,
learning-rate schedulers (``flowserve.optim.lr_scheduler``), and PyTorch's BatchNorm
helper ``flowserve.optim.swa_utils.update_bn`` (loaded when first named)."""

from flowserve.optim import lr_scheduler  # noqa: F401
from flowserve.optim.adadelta import Adadelta, Adamax  # noqa: F401
from flowserve.optim.adam import Adam, AdamW  # noqa: F401
from flowserve.optim.lamb import LAMB  # noqa: F401
from flowserve.optim.lbfgs import LBFGS  # noqa: F401
from flowserve.optim.nadam import NAdam, RAdam  # noqa: F401
from flowserve.optim.optimizer import Optimizer  # noqa: F401
from flowserve.optim.rmsprop import Adagrad, RMSprop  # noqa: F401
from flowserve.optim.sgd import SGD  # noqa: F401

from flowserve._missing import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("flowserve.optim")  # PyTorch/OneFlow names flowserve lacks: say what to use instead
