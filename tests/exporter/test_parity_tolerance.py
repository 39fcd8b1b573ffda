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


def test_outputs_drawn_at_random_are_checked_for_shape_and_the_rest_by_value(tmp_path):
    class Noisy(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.linear = flow.nn.Linear(8, 4)

        def build(self, x):
            y = self.linear(x)
            return y, y + 0.1 * flow.randn(x.shape[0], 4)

    graph = Noisy()
    graph(flow.randn(3, 8))
    flow.save(graph, tmp_path / "g")
    report = export(tmp_path / "g").report
    by_output = {}
    for p in report.parity:
        by_output.setdefault(p.output, set()).add(p.compared)
    assert sorted(by_output.values(), key=sorted) == [{"shape"}, {"values"}]
    assert len({p.batch for p in report.parity}) == 2  # both batch sizes were run
