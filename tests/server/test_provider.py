"""``flowserve serve --provider openvino``: models run on OpenVINO with ONNX Runtime's numbers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from flowserve.onnx_backend import openvino, providers, runtime
from flowserve.server.loading import load_model_proto
from flowserve.server.errors import ModelLoadError
from flowserve.server.runner import OrtRunner
from flowserve.server.settings import ServerSettings

from .models import mlp, mlp_reference


@pytest.mark.skipif(not openvino.available(), reason='needs pip install "flowserve[openvino]"')
def test_openvino_runner_gives_onnx_runtime_numbers():
    model = mlp((6, 16, 3), seed=2)
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    runner = OrtRunner(model, device="cpu", provider="openvino")
    assert "OpenVINO" in runner.providers[0] and runner.device == "cpu"
    np.testing.assert_allclose(runner.run({"x": x})["y"], mlp_reference(model, x), rtol=1e-5, atol=1e-5)


def test_openvino_absent_is_a_load_error(monkeypatch):
    monkeypatch.setattr(openvino, "plugin_devices", lambda: [])
    monkeypatch.setattr(openvino, "runtime_available", lambda: False)
    with pytest.raises(ModelLoadError, match=r"pip install \"flowserve\[openvino\]\""):
        OrtRunner(mlp(), device="cpu", provider="openvino")


def test_provider_setting_is_checked():
    assert ServerSettings(provider="openvino").provider == "openvino"
    assert ServerSettings(provider="tensorrt").provider == "tensorrt"
    with pytest.raises(ValueError, match="provider"):
        ServerSettings(provider="tensor-rt")


def test_a_saved_graph_is_exported_for_its_provider(tmp_path):
    """A saved directory served on OpenVINO, which runs no com.microsoft kernels, is
    exported portable; on ONNX Runtime it takes the fused kernels (GELU here)."""
    import flowserve as flow  # local: the saved graph is made with the core

    class Head(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.body = flow.nn.Sequential(flow.nn.Linear(4, 8), flow.nn.GELU())

        def build(self, x):
            return self.body(x)

    graph = Head()
    graph(flow.tensor(np.ones((2, 4), np.float32)))
    flow.save(graph, tmp_path / "head")
    domains = {name: {n.domain for n in load_model_proto(tmp_path / "head", provider=name).graph.node}
               for name in ("onnxruntime", "openvino")}
    assert "com.microsoft" in domains["onnxruntime"] and "com.microsoft" not in domains["openvino"]
    assert [providers.export_target(n) for n in providers.NAMES] == ["onnxruntime"] * 5 + ["portable"]


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowserve.server", *args, "--http-port", "0", "--no-grpc"],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(runtime.tensorrt_problem() is None, reason="TensorRT is usable here")
def test_serve_with_a_missing_tensorrt_stops_with_one_line(mlp_file):
    done = _serve(str(mlp_file), "--provider", "tensorrt")
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--provider tensorrt: expected tensorrt usable by onnxruntime, got: " in errors[0]
    assert errors[0].endswith('pip install "flowserve[tensorrt]"') or "no device" in errors[0]


def test_serve_with_an_unknown_provider_names_the_vocabulary(mlp_file):
    done = _serve(str(mlp_file), "--provider", "trt")
    assert done.returncode == 2 and done.stderr.startswith("error: --provider: ")
    assert "'auto', 'onnxruntime', 'cpu', 'cuda', 'tensorrt' or 'openvino'" in done.stderr
