"""``flow.unittest.env``: the test run's settings, read from OneFlow's ``ONEFLOW_TEST_*``
environment variables (as a OneFlow CI job sets them), with one process on one device
when they are unset."""

from __future__ import annotations

import os

from flowserve import env as _run_env


def eager_execution_enabled() -> bool:
    """``ONEFLOW_TEST_ENABLE_EAGER=1``."""
    return os.getenv("ONEFLOW_TEST_ENABLE_EAGER") == "1"


def typing_check_enabled() -> bool:
    """``ONEFLOW_TEST_ENABLE_TYPING_CHECK=1``."""
    return os.getenv("ONEFLOW_TEST_ENABLE_TYPING_CHECK") == "1"


def has_node_list() -> bool:
    return bool(os.getenv("ONEFLOW_TEST_NODE_LIST"))


def node_list() -> list[str]:
    """The hosts of ``ONEFLOW_TEST_NODE_LIST`` (comma separated)."""
    hosts = os.getenv("ONEFLOW_TEST_NODE_LIST")
    if not hosts:
        raise RuntimeError("ONEFLOW_TEST_NODE_LIST is not set (a comma-separated list of the test's hosts)")
    return hosts.split(",")


def node_size() -> int:
    """``ONEFLOW_TEST_NODE_NUM``, else how many hosts ``ONEFLOW_TEST_NODE_LIST`` names, else 1."""
    num = os.getenv("ONEFLOW_TEST_NODE_NUM")
    if num:
        return _as_int("ONEFLOW_TEST_NODE_NUM", num)
    return len(node_list()) if has_node_list() else 1


def device_num() -> int:
    """Devices per node the test runs on: ``ONEFLOW_TEST_DEVICE_NUM``, else 1."""
    num = os.getenv("ONEFLOW_TEST_DEVICE_NUM")
    return _as_int("ONEFLOW_TEST_DEVICE_NUM", num) if num else 1


def has_world_size() -> bool:
    return True


def world_size() -> int:
    """How many processes the run has (``flow.env.get_world_size()``)."""
    return _run_env.get_world_size()


def _as_int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None
