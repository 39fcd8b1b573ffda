"""The one ONNX Runtime module: provider choice, CUDA detection in one place, sessions for
graph mode, the exporter and the server alike."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import flowserve
from flowserve.errors import DeviceError
from flowserve.onnx_backend import providers, runtime
from flowserve.server.errors import ModelLoadError
from flowserve.server.runner import OrtRunner

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
        assert tuned[0] == (runtime.CUDA_PROVIDER, {"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "0"})
    else:
        assert runtime.choose_providers("auto") == [runtime.CPU_PROVIDER]
        with pytest.raises(DeviceError, match="device 'cuda' asked for, but no CUDA device is usable"):
            runtime.choose_providers("cuda")


def test_a_gpu_whose_provider_does_not_start_is_one_line(monkeypatch, caplog):
    """A GPU is visible but the CUDA provider cannot start (a CUDA library missing):
    ``cuda`` fails with one line naming the cause, ``auto`` runs on the CPU after one
    warning, not one per session."""
    reason = "its CUDA provider does not load (libcublasLt.so.13: cannot open shared object file)"
    monkeypatch.setattr(runtime, "cuda_problem", lambda: reason)
    monkeypatch.setattr(runtime, "cuda_device_count", lambda: 1)
    runtime._warn_once.cache_clear()
    with pytest.raises(DeviceError) as err:
        providers.create_session(_add_one(), device="cuda")
    assert str(err.value) == f"device 'cuda' asked for, but no CUDA device is usable by onnxruntime: {reason}"
    with pytest.raises(ModelLoadError, match="libcublasLt.so.13"):
        OrtRunner(_add_one(), device="cuda")
    with caplog.at_level("WARNING", logger="flowserve.runtime"):
        sessions = [providers.create_session(_add_one(), device="auto") for _ in range(3)]
    assert all(s.get_providers() == [runtime.CPU_PROVIDER] for s in sessions)
    warned = [r.getMessage() for r in caplog.records if r.name == "flowserve.runtime"]
    assert warned == [f"a CUDA GPU is visible but onnxruntime cannot use it: {reason}; running on the CPU"]
    runtime._warn_once.cache_clear()


def test_the_cuda_provider_library_that_does_not_load_is_named():
    """Where this onnxruntime's CUDA provider library does not load here (no CUDA
    libraries installed), the reason ``cuda_problem`` gives names the missing library."""
    library = Path(runtime.ort.__file__).parent / "capi" / "libonnxruntime_providers_cuda.so"
    if runtime.CUDA_PROVIDER not in runtime.ort.get_available_providers() or not library.is_file():
        pytest.skip("this onnxruntime has no CUDA provider library")
    try:
        ctypes.CDLL(str(library))
    except OSError as exc:
        missing = str(exc).split(":")[0]
    else:
        pytest.skip("the CUDA provider loads here")
    runtime.cuda_problem.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(runtime, "cuda_device_count", lambda: 1)
            assert missing in runtime.cuda_problem()
    finally:
        runtime.cuda_problem.cache_clear()


def test_sessions_share_the_cores_and_take_graph_options():
    so = runtime.session_options(instances=2, options={"compress_memory": True})
    assert so.intra_op_num_threads >= 1 and not so.enable_cpu_mem_arena
    assert runtime.session_options(threads=3).intra_op_num_threads == 3
    session = providers.create_session(_add_one(), device="cpu")
    out = session.run(None, {"x": np.zeros((3, 2), np.float32)})[0]
    np.testing.assert_array_equal(out, np.ones((3, 2), np.float32))


def test_the_server_runner_uses_the_same_runtime():
    runner = OrtRunner(_add_one(), device="cpu", instances=2)
    assert runner.device == "cpu"
    np.testing.assert_array_equal(runner.run({"x": np.ones((1, 2), np.float32)})["y"], [[2.0, 2.0]])
    with pytest.raises(ModelLoadError, match="expected 'auto', 'cpu' or 'cuda'"):
        OrtRunner(_add_one(), device="gpu0")


def test_one_place_probes_cuda_and_builds_sessions():
    """CUDA detection and ``InferenceSession`` construction live only in flowserve/onnx_backend/runtime.py."""
    found = []
    for folder in ("flowserve", "exporter", "server"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for needle in ("libcuda", "get_available_providers", "InferenceSession(", "/dev/nvidia"):
                if needle in text:
                    found.append(f"{path.relative_to(ROOT)}: {needle}")
    assert all(f.startswith("flowserve/onnx_backend/runtime.py") for f in found), found


# -- flow.backends' switches reach the sessions ----------------------------------------------------


@pytest.fixture
def backend_flags():
    """flow.backends as a script would set it; restored afterwards."""
    cudnn, matmul = flowserve.backends.cudnn, flowserve.backends.cuda.matmul
    saved = (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32)
    yield flowserve.backends
    cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = saved
    flowserve.backends.use_deterministic_algorithms(False)


class _Doubling(flowserve.nn.Graph):
    def build(self, x):
        return x * 2


def _graph_session_options(x):
    graph = _Doubling()
    graph(x)
    return graph._compiled.session.get_session_options()


def test_deterministic_switches_set_deterministic_compute_in_every_session(backend_flags):
    x = flowserve.ones(2, 3)
    assert not runtime.session_options().use_deterministic_compute
    assert not _graph_session_options(x).use_deterministic_compute
    backend_flags.cudnn.deterministic = True
    assert providers.create_session(_add_one(), device="cpu").get_session_options().use_deterministic_compute
    assert _graph_session_options(x).use_deterministic_compute
    assert OrtRunner(_add_one(), device="cpu")._session.get_session_options().use_deterministic_compute
    backend_flags.cudnn.deterministic = False
    flowserve.use_deterministic_algorithms(True)
    assert flowserve.are_deterministic_algorithms_enabled()
    assert _graph_session_options(x).use_deterministic_compute
    flowserve.use_deterministic_algorithms(False)
    assert not _graph_session_options(x).use_deterministic_compute
    with pytest.raises(TypeError, match="expects mode True or False, got 'yes'"):
        flowserve.use_deterministic_algorithms("yes")


def test_cudnn_benchmark_picks_the_conv_algorithm_search(backend_flags):
    assert runtime.cuda_provider_options()["cudnn_conv_algo_search"] == "HEURISTIC"  # PyTorch's default
    backend_flags.cudnn.benchmark = True
    assert runtime.cuda_provider_options()["cudnn_conv_algo_search"] == "EXHAUSTIVE"
    # a graph's own OneFlow option wins over the process-wide switch
    options = runtime.cuda_provider_options({"cudnn_conv_heuristic_search_algo": True})
    assert options["cudnn_conv_algo_search"] == "HEURISTIC"
    backend_flags.cudnn.benchmark = False
    options = runtime.cuda_provider_options({"cudnn_conv_heuristic_search_algo": False})
    assert options["cudnn_conv_algo_search"] == "EXHAUSTIVE"


def test_tf32_only_where_both_switches_allow_it(backend_flags):
    matmul, cudnn = backend_flags.cuda.matmul, backend_flags.cudnn
    for mm, conv, expected in [(False, True, "0"), (True, False, "0"), (True, True, "1"), (False, False, "0")]:
        matmul.allow_tf32, cudnn.allow_tf32 = mm, conv
        assert runtime.cuda_provider_options()["use_tf32"] == expected, (mm, conv)


def test_the_cuda_provider_gets_the_switches(backend_flags, monkeypatch):
    monkeypatch.setattr(runtime, "cuda_usable", lambda: True)  # no GPU here: check what would be passed
    backend_flags.cudnn.benchmark = True
    backend_flags.cuda.matmul.allow_tf32 = True
    providers = runtime.choose_providers("cuda")
    assert providers == [(runtime.CUDA_PROVIDER, {"cudnn_conv_algo_search": "EXHAUSTIVE", "use_tf32": "1"}),
                         runtime.CPU_PROVIDER]
