"""The parity tolerance can be set, and a failure says how far off and what to do."""

from __future__ import annotations

import subprocess
import sys

import pytest

import flowserve as flow
from flowserve.errors import ExportError
from flowserve.exporter import export


class Infer(flow.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


@pytest.fixture
def saved(tmp_path):
    flow.manual_seed(0)
    graph = Infer(flow.nn.Sequential(flow.nn.Linear(8, 32), flow.nn.Tanh(), flow.nn.Linear(32, 4)))
    graph(flow.randn(3, 8))
    flow.save(graph, tmp_path / "g")
    return tmp_path / "g"


def test_default_tolerance_passes_and_an_impossible_one_fails(saved):
    assert export(saved).report.parity
    with pytest.raises(ExportError, match=r"allowed rtol=1e-12.*--rtol"):
        export(saved, rtol=1e-12)


def test_cli_rtol_option(saved, tmp_path):
    cli = [sys.executable, "-m", "flowserve.cli", "export", str(saved), "-o", str(tmp_path / "m.onnx")]
    failed = subprocess.run(cli + ["--rtol", "1e-12"], capture_output=True, text=True, timeout=120)
    assert failed.returncode == 2 and "rtol=1e-12" in failed.stderr and "Traceback" not in failed.stderr
    ok = subprocess.run(cli + ["--rtol", "1e-4"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
