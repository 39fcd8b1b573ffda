"""docs/nn.md's "Missing names, by namespace" is what ``bench/api_coverage.py`` finds today:
a name added to flowserve (or dropped) without regenerating the list fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch's names are the reference")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "api_coverage.py"


def _coverage():
    spec = importlib.util.spec_from_file_location("api_coverage", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not torch.__version__.startswith("2.13"), reason="the list is generated against PyTorch 2.13")
def test_missing_names_in_docs_are_current(capsys):
    assert _coverage().main(["--check"]) == 0, capsys.readouterr().out


def test_filled_names_are_not_listed_missing():
    result = _coverage().missing()
    assert not {"divide", "diff", "meshgrid"} & set(result["torch"][1])
    assert not {"RMSNorm", "Dropout2d", "Softmin"} & set(result["torch.nn"][1])
    assert all(len(names) < count for count, names in result.values())
