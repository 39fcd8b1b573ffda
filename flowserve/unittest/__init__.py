"""``flow.unittest``: OneFlow's public test helpers, for a OneFlow user's own test suite.

``TestCase`` is ``unittest.TestCase`` (OneFlow's own, since its multi-client runtime needs no
set-up per case). ``skip_unless_1n1d()`` … ``skip_unless_2n4d()`` return a decorator that
runs the test only on that many nodes (``ONEFLOW_TEST_NODE_NUM``, else the length of
``ONEFLOW_TEST_NODE_LIST``, else 1) and devices per node (``ONEFLOW_TEST_DEVICE_NUM``, else 1),
as OneFlow's do; elsewhere ``unittest.skip`` with the reason. ``env`` reads those settings;
``dataset_dir()`` is ``ONEFLOW_TEST_DATASET_DIR`` (default ``/dataset``).

>>> import flowserve as flow
>>> import flowserve.unittest
>>> @flow.unittest.skip_unless_1n1d()
... class TestOne(flow.unittest.TestCase):
...     def test_add(self):
...         self.assertEqual((flow.ones(2) + 1).tolist(), [2.0, 2.0])
>>> flow.unittest.env.device_num(), flow.unittest.env.node_size()
(1, 1)
"""

from __future__ import annotations

from flowserve.unittest import env
from flowserve.unittest.cases import (
    MLIRTestCase,
    TestCase,
    dataset_dir,
    num_nodes_required,
    register_test_cases,
    skip_unless,
    skip_unless_1n1d,
    skip_unless_1n2d,
    skip_unless_1n4d,
    skip_unless_2n1d,
    skip_unless_2n2d,
    skip_unless_2n4d,
)

__all__ = [
    "MLIRTestCase", "TestCase", "dataset_dir", "env", "num_nodes_required", "register_test_cases", "skip_unless",
    "skip_unless_1n1d", "skip_unless_1n2d", "skip_unless_1n4d", "skip_unless_2n1d", "skip_unless_2n2d",
    "skip_unless_2n4d",
]
