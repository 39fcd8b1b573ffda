"""``flow.unittest``'s test case and skip decorators (OneFlow's ``oneflow.framework.unittest``)."""

from __future__ import annotations

import importlib.util
import os
import unittest
from typing import Any, Callable

from flowserve.unittest import env

TestCase = unittest.TestCase  # OneFlow's TestCase is unittest's own


def skip_unless(n: int, d: int):
    """A decorator that keeps the test on ``n`` nodes of ``d`` devices each, and skips it
    (with the reason) elsewhere."""
    if env.node_size() == n and env.device_num() == d:
        return lambda func: func
    return unittest.skip(f"only runs when node_size is {n} and device_num is {d}")


def skip_unless_1n1d():
    return skip_unless(1, 1)


def skip_unless_1n2d():
    return skip_unless(1, 2)


def skip_unless_1n4d():
    return skip_unless(1, 4)


def skip_unless_2n1d():
    return skip_unless(2, 1)


def skip_unless_2n2d():
    return skip_unless(2, 2)


def skip_unless_2n4d():
    return skip_unless(2, 4)


class MLIRTestCase(unittest.TestCase):
    """OneFlow's base for its MLIR tests: each test's ``ONEFLOW_MLIR*`` environment variables
    are removed after it."""

    def tearDown(self):
        for key in [k for k in os.environ if k.startswith("ONEFLOW_MLIR")]:
            os.environ.pop(key)


def dataset_dir(sub_dir: str | None = None) -> str:
    """Where the test datasets are: ``ONEFLOW_TEST_DATASET_DIR`` (default ``/dataset``), joined
    with ``sub_dir`` when given."""
    base = os.getenv("ONEFLOW_TEST_DATASET_DIR") or "/dataset"
    return base if sub_dir is None else os.path.join(base, sub_dir)


NUM_NODES_ATTR = "__oneflow_test_case_num_nodes_required__"


def num_nodes_required(num_nodes: int) -> Callable[[Callable], Callable]:
    """Mark a test function with the number of nodes it needs (read by ``register_test_cases``)."""

    def decorate(func):
        setattr(func, NUM_NODES_ATTR, num_nodes)
        return func

    return decorate


def register_test_cases(scope: dict[str, Any], directory: str, filter_by_num_nodes: Callable[[int], bool],
                        base_class: type = unittest.TestCase) -> None:
    """For each ``test*.py`` in ``directory``, put into ``scope`` a test case class of the
    file's name holding its module-level ``test*`` functions whose node count
    ``filter_by_num_nodes`` accepts."""
    for file in sorted(os.listdir(directory)):
        path = os.path.join(directory, file)
        if not (os.path.isfile(path) and file.startswith("test") and file.endswith(".py")):
            continue
        module = _load_source(file[:-3], path)
        methods = {name: getattr(module, name) for name in dir(module)
                   if name.startswith("test") and callable(getattr(module, name))
                   and filter_by_num_nodes(getattr(getattr(module, name), NUM_NODES_ATTR, 1))}
        scope[file[:-3]] = type(file[:-3], (base_class,), methods)


def _load_source(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
