"""The one ONNX Runtime module: provider choice, CUDA detection in one place, sessions for
graph mode, the exporter and the server alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import flowserve
from flowserve.errors import DeviceError
from flowserve.exporter import runtime
from flowserve.server.errors import ModelLoadError
from flowserve.server.runtime import OrtRunner

ROOT = Path(flowserve.__file__).parent.parent


def _add_one() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "add_one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_provider_choice():
    assert runtime.choose_providers("cpu") == [runtime.CPU_PROVIDER]
    with pytest.raises(DeviceError, match="expected 'auto', 'cpu' or 'cuda', got 'tpu'"):
        runtime.choose_providers("tpu")
    if runtime.cuda_usable():
        assert runtime.choose_providers("auto")[0] == runtime.CUDA_PROVIDER
        tuned = runtime.choose_providers("cuda", {"cudnn_conv_heuristic_search_algo": True})
        assert tuned[0] == (runtime.CUDA_PROVIDER, {"cudnn_conv_algo_search": "HEURISTIC"})
    else:
        assert runtime.choose_providers("auto") == [runtime.CPU_PROVIDER]
        with pytest.raises(DeviceError, match="device 'cuda' asked for, but no CUDA device is usable"):
            runtime.choose_providers("cuda")


def test_sessions_share_the_cores_and_take_graph_options():
    so = runtime.session_options(instances=2, options={"compress_memory": True})
    assert so.intra_op_num_threads >= 1 and not so.enable_cpu_mem_arena
    assert runtime.session_options(threads=3).intra_op_num_threads == 3
    session = runtime.create_session(_add_one(), device="cpu")
    out = session.run(None, {"x": np.zeros((3, 2), np.float32)})[0]
    np.testing.assert_array_equal(out, np.ones((3, 2), np.float32))


def test_the_server_runner_uses_the_same_runtime():
    runner = OrtRunner(_add_one(), device="cpu", instances=2)
    assert runner.device == "cpu"
    np.testing.assert_array_equal(runner.run({"x": np.ones((1, 2), np.float32)})["y"], [[2.0, 2.0]])
    with pytest.raises(ModelLoadError, match="expected 'auto', 'cpu' or 'cuda'"):
        OrtRunner(_add_one(), device="gpu0")


def test_one_place_probes_cuda_and_builds_sessions():
    """CUDA detection and ``InferenceSession`` construction live only in exporter/runtime.py."""
    found = []
    for folder in ("flowserve", "exporter", "server"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for needle in ("libcuda", "get_available_providers", "InferenceSession(", "/dev/nvidia"):
                if needle in text:
                    found.append(f"{path.relative_to(ROOT)}: {needle}")
    assert all(f.startswith("exporter/runtime.py") for f in found), found
