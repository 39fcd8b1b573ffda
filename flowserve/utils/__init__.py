"""``flowserve.utils``: data loading (``flowserve.utils.data``), TensorBoard logging
(``flowserve.utils.tensorboard``) and internal helpers.

``data`` loads on first use, so that core modules may import helpers from here
(``flowserve.utils.tree``) without importing the data tools and the tensor with them.
"""

import importlib


def __getattr__(name: str):
    if name in ("data", "tensorboard"):  # tensorboard: SummaryWriter, needing the package only when used
        return importlib.import_module(f"flowserve.utils.{name}")
    raise AttributeError(f"module 'flowserve.utils' has no attribute '{name}'")
