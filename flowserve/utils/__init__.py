"""``flowserve.utils``: data loading (``flowserve.utils.data``) and internal helpers.

``data`` loads on first use, so that core modules may import helpers from here
(``flowserve.utils.tree``) without importing the data tools and the tensor with them.
"""

import importlib


def __getattr__(name: str):
    if name == "data":
        return importlib.import_module("flowserve.utils.data")
    raise AttributeError(f"module 'flowserve.utils' has no attribute '{name}'")
