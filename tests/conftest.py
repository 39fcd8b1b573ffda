"""Fixtures shared across the test packages."""

from __future__ import annotations

import pytest

from tests.deployments import build_deployments


@pytest.fixture(scope="session")
def deployments(tmp_path_factory):
    """The four reference models trained, saved with examples and exported at every CPU
    precision: name -> (saved dir, {precision: VerifiedExport})."""
    return build_deployments(tmp_path_factory.mktemp("deployments"))
