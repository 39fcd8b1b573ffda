"""The deployment examples run as a user would run them (the graph examples are run in
tests/graph/test_graph_seeds.py and tests/test_skeleton_examples.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
@pytest.mark.parametrize("script", ["export_mobilenet.py", "serve_and_query.py", "verified_int8.py"])
def test_example_runs(script, tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip(), "the example printed nothing"


def test_autograd_example_runs(tmp_path):
    script = EXAMPLES / "autograd_and_threads.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "untouched by autograd.grad: True" in done.stdout and "tanh'' (0.5) = -0.7269" in done.stdout
    assert "main thread still records gradients: True" in done.stdout
