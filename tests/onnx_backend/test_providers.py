"""The execution-provider table (``flowserve.onnx_backend.providers``) and the per-shape
session pool: one vocabulary for graphs, exporter and server; an unknown or missing
provider is one line naming what to install; TensorRT's options as a pure function; a
missing TensorRT under ``auto`` falls back with one warning (TensorRT is absent here)."""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from flowserve.errors import DeviceError
from flowserve.onnx_backend import providers, runtime
from flowserve.onnx_backend.session_pool import SessionPool
from flowserve.server.errors import ModelLoadError
from flowserve.server.runner import OrtRunner
from flowserve.server.settings import ProviderName, ServerSettings

ROOT = Path(__file__).resolve().parents[2]
TENSORRT_USABLE = runtime.tensorrt_problem() is None


def _model(dims=("batch", 4)) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# -- the table ------------------------------------------------------------------------------------


def test_the_table_holds_every_engine_with_its_facts():
    assert providers.NAMES == ("auto", "onnxruntime", "cpu", "cuda", "tensorrt", "openvino")
    assert providers.GRAPH_NAMES == ("auto", "cpu", "cuda", "openvino")  # tensorrt serves only
    table = providers.PROVIDERS
    assert {n: p.devices for n, p in table.items()} == {
        "cpu": ("cpu",), "cuda": ("cuda",), "tensorrt": ("cuda",), "openvino": ("cpu",)}
    assert [n for n, p in table.items() if not p.microsoft_ops] == ["openvino"]
    assert [n for n, p in table.items() if p.session_per_shape] == ["cuda"]
    assert {n: p.install for n, p in table.items()} == {
        "cpu": "", "cuda": 'pip install "flowserve[cuda]"', "tensorrt": 'pip install "flowserve[tensorrt]"',
        "openvino": 'pip install "flowserve[openvino]"'}
    assert table["cpu"].problem() is None and table["cpu"].installed()
    with pytest.raises(TypeError):
        table["gpu"] = table["cuda"]  # read-only


def test_the_server_setting_spells_the_table_vocabulary():
    assert typing.get_args(ProviderName) == providers.NAMES
    for name in providers.NAMES:
        assert ServerSettings(provider=name).provider == name


def test_an_unknown_provider_is_one_line_naming_the_vocabulary():
    with pytest.raises(ValueError) as err:
        providers.check("tensor-rt")
    assert str(err.value) == ("execution provider: expected one of auto, onnxruntime, cpu, cuda, tensorrt, "
                              "openvino, got 'tensor-rt'")
    with pytest.raises(ModelLoadError, match="expected one of auto, onnxruntime"):
        OrtRunner(_model(), device="cpu", provider="gpu")


def test_provider_names_are_spelled_only_by_the_backend():
    """ONNX Runtime's provider names appear in runtime.py and openvino.py alone; every
    other module reads them through the table."""
    spelled = re.compile(r'"(CPU|CUDA|Tensorrt|OpenVINO)ExecutionProvider"')
    found = [str(path.relative_to(ROOT)) for folder in ("flowserve", "exporter", "server")
             for path in sorted((ROOT / folder).rglob("*.py")) if spelled.search(path.read_text(encoding="utf-8"))]
    assert found == ["flowserve/onnx_backend/openvino.py", "flowserve/onnx_backend/runtime.py"]


def test_sessions_name_the_entry_they_run_on():
    session = providers.create_session(_model(), provider="cpu")
    assert providers.of_session(session) is providers.PROVIDERS["cpu"]
    runner = OrtRunner(_model(), device="cpu", provider="cpu")
    assert runner.engine.name == "cpu" and runner.device == "cpu"
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(runner.run({"x": x})["y"], np.maximum(x, 0))


def test_onnxruntime_means_its_best_provider_here():
    best = "cuda" if runtime.cuda_usable() else "cpu"
    assert providers.for_serving("onnxruntime").name == best
    assert providers.for_serving("onnxruntime", "cpu").name == "cpu"
    assert providers.for_device("auto", "cpu").name == "cpu"


def test_a_provider_against_its_device_is_one_line():
    with pytest.raises(DeviceError, match="--provider openvino: expected --device auto or cpu, got --device cuda"):
        providers.for_serving("openvino", "cuda")


# -- TensorRT, absent on this machine ------------------------------------------------------------


@pytest.mark.skipif(TENSORRT_USABLE, reason="TensorRT is usable here")
def test_a_missing_tensorrt_is_one_line_naming_what_to_install():
    with pytest.raises(DeviceError) as err:
        providers.for_serving("tensorrt")
    message = str(err.value)
    assert "\n" not in message and message.startswith("--provider tensorrt: expected tensorrt usable")
    assert message.endswith('pip install "flowserve[tensorrt]"') or "no device" in message
    with pytest.raises(ModelLoadError, match=r"--provider tensorrt: .*flowserve\[tensorrt\]"):
        OrtRunner(_model(), device="auto", provider="tensorrt", max_batch_size=8)


def test_tensorrt_libraries_that_do_not_load_are_named(monkeypatch):
    """Where onnxruntime has the TensorRT provider but TensorRT 10 is not installed, the
    probe names the library the provider links."""
    if runtime.TENSORRT_PROVIDER not in runtime.ort.get_available_providers():
        pytest.skip("this onnxruntime has no TensorRT provider")
    monkeypatch.setattr(runtime, "TENSORRT_LIBRARIES", ("libnvinfer-that-is-not-there.so.10",))
    problem = runtime.tensorrt_problem.__wrapped__()
    assert problem.startswith("TensorRT 10's libnvinfer-that-is-not-there.so.10 does not load (")


@pytest.mark.skipif(TENSORRT_USABLE, reason="TensorRT is usable here")
def test_auto_falls_back_from_tensorrt_with_one_warning(caplog):
    providers._warn_once.cache_clear()
    with caplog.at_level("WARNING", logger="flowserve.runtime"):
        runners = [OrtRunner(_model(), device="auto", provider="auto") for _ in range(3)]
    best = "cuda" if runtime.cuda_usable() else "cpu"
    assert all(r.engine.name == best for r in runners)
    warned = [r.getMessage() for r in caplog.records if "TensorRT" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("--provider auto: tensorrt is not usable here (")
    assert warned[0].endswith(f'pip install "flowserve[tensorrt]"); serving on {best}')
    providers._warn_once.cache_clear()


def test_auto_on_the_cpu_does_not_look_for_tensorrt(caplog):
    providers._warn_once.cache_clear()
    with caplog.at_level("WARNING", logger="flowserve.runtime"):
        assert OrtRunner(_model(), device="cpu", provider="auto").engine.name == "cpu"
    assert not [r for r in caplog.records if "TensorRT" in r.getMessage()]


# -- TensorRT's options: a pure function ---------------------------------------------------------


def test_tensorrt_options_fp16_caches_and_one_profile(tmp_path):
    inputs = [("x", ["batch", 3, 224, 224]), ("mask", [-1, 16])]
    assert providers.tensorrt_options(inputs, 32, tmp_path) == {
        "trt_fp16_enable": "1",
        "trt_engine_cache_enable": "1", "trt_engine_cache_path": str(tmp_path),
        "trt_timing_cache_enable": "1", "trt_timing_cache_path": str(tmp_path),
        "trt_profile_min_shapes": "x:1x3x224x224,mask:1x16",
        "trt_profile_opt_shapes": "x:32x3x224x224,mask:32x16",
        "trt_profile_max_shapes": "x:32x3x224x224,mask:32x16",
    }


def test_tensorrt_options_leave_the_profile_where_more_than_the_batch_is_free(tmp_path):
    options = providers.tensorrt_options([("tokens", ["batch", "sequence"])], 8, tmp_path)
    assert not any(key.startswith("trt_profile") for key in options) and options["trt_fp16_enable"] == "1"
    static = providers.tensorrt_options([("x", [4, 3])], 0, tmp_path)  # a fixed batch: its own size
    assert static["trt_profile_min_shapes"] == static["trt_profile_max_shapes"] == "x:4x3"


def test_the_engine_cache_is_keyed_by_model_gpu_versions_and_batch(tmp_path):
    versions = {"onnxruntime": "1.31.1", "tensorrt": "10.16.1.11"}

    def folder(model=b"model", batch=64, gpu="NVIDIA H200", **changed):
        return providers.tensorrt_cache_dir(model, batch, root=tmp_path, gpu=gpu, versions={**versions, **changed})

    assert folder() == folder() and folder().parent == tmp_path / "tensorrt"
    assert len({folder(), folder(model=b"other"), folder(batch=32), folder(gpu="NVIDIA H100"),
                folder(tensorrt="10.13.3.9"), folder(onnxruntime="1.30.0")}) == 6


def test_tensorrt_options_for_a_model_live_under_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWSERVE_CACHE_DIR", str(tmp_path))
    options = providers.tensorrt_options_for(_model(), 16)
    folder = Path(options["trt_engine_cache_path"])
    assert folder.is_dir() and folder.parent == tmp_path / "tensorrt"
    assert options["trt_profile_min_shapes"] == "x:1x4" and options["trt_profile_max_shapes"] == "x:16x4"


def test_the_tensorrt_session_puts_tensorrt_before_cuda(monkeypatch):
    monkeypatch.setattr(runtime, "cuda_usable", lambda: True)  # no GPU here: check what would be passed
    listed = providers.PROVIDERS["tensorrt"].ort_providers({"tensorrt": {"trt_fp16_enable": "1"}})
    assert listed[0] == (runtime.TENSORRT_PROVIDER, {"trt_fp16_enable": "1"})
    assert [p[0] if isinstance(p, tuple) else p for p in listed[1:]] == [runtime.CUDA_PROVIDER, runtime.CPU_PROVIDER]


# -- one session per shape ----------------------------------------------------------------------


def test_the_pool_gives_each_key_a_session_and_keeps_the_latest():
    made = []

    def new():
        made.append(object())
        return made[-1]

    first = object()
    pool = SessionPool(first, new, keep=2)
    assert pool.get(8) is first and pool.get(8) is first and made == []
    assert pool.get(3) is made[0] and pool.get(5) is made[1]
    assert list(pool) == [3, 5] and pool.sessions == 2  # 8 was let go, least recently used
    assert pool.get(3) is made[0] and list(pool) == [5, 3]


def test_the_pool_lets_its_factory_go_once_every_key_has_a_session():
    made = []
    pool = SessionPool("first", lambda: made.append("s") or f"s{len(made)}", keys=2)
    assert [pool.get(1), pool.get(2)] == ["first", "s1"]
    assert pool.get(4) == "first" and made == ["s"]  # beyond the keys: the first session
    shared = SessionPool("only")
    assert [shared.get(k) for k in (1, 2, 3)] == ["only"] * 3 and shared.sessions == 1


def test_the_tensorrt_extra_brings_the_tensorrt_this_onnxruntime_links():
    """``pip install "flowserve[tensorrt]"`` pins TensorRT 10's libraries, the major version
    whose libraries this onnxruntime's TensorRT provider names (libnvinfer.so.10)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = [r for r in extras["tensorrt"] if r.startswith("tensorrt-cu13-libs")]
    assert len(pins) == 1 and ">=10." in pins[0] and "<11" in pins[0] and "flowserve[cuda]" in extras["tensorrt"]
    assert all(name.endswith(".so.10") for name in runtime.TENSORRT_LIBRARIES)
    library = Path(runtime.ort.__file__).parent / "capi" / "libonnxruntime_providers_tensorrt.so"
    if not library.is_file():
        pytest.skip("this onnxruntime has no TensorRT provider library")
    linked = library.read_bytes()
    assert all(name.encode() + b"\0" in linked for name in runtime.TENSORRT_LIBRARIES)


def test_a_named_gpu_provider_that_does_not_start_is_an_error_and_auto_falls_back(monkeypatch, caplog):
    """``provider="cuda"`` asked for by name stops with one line where the CUDA provider
    does not start; under "auto" the session runs on the CPU after one warning."""
    if runtime.cuda_usable():
        pytest.skip("the CUDA provider starts here")
    monkeypatch.setattr(runtime, "cuda_usable", lambda: True)  # as where the probe passes but the start fails
    runtime._warn_once.cache_clear()
    with pytest.raises(DeviceError, match=r"^CUDAExecutionProvider did not start: "):
        providers.create_session(_model(), provider="cuda")
    with caplog.at_level("WARNING", logger="flowserve.runtime"):
        session = providers.create_session(_model(), provider="auto")
    assert providers.of_session(session).name == "cpu"
    warned = [r.getMessage() for r in caplog.records if r.name == "flowserve.runtime"]
    assert len(warned) == 1 and warned[0].startswith("CUDAExecutionProvider did not start (")
    runtime._warn_once.cache_clear()


def test_tensorrt_libraries_installed_by_pip_are_loaded_from_their_folder(tmp_path, monkeypatch):
    """pip's ``tensorrt_libs`` folder is where the probe loads TensorRT from (libm stands in
    for libnvinfer here); with the libraries loaded, what remains is CUDA's answer."""
    libm = Path("/lib/x86_64-linux-gnu/libm.so.6")
    if runtime.TENSORRT_PROVIDER not in runtime.ort.get_available_providers() or not libm.is_file():
        pytest.skip("needs onnxruntime's TensorRT provider and an x86-64 glibc")
    folder = tmp_path / runtime.TENSORRT_PACKAGE
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "libnvinfer.so.10").symlink_to(libm)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(runtime, "TENSORRT_LIBRARIES", ("libnvinfer.so.10",))
    monkeypatch.setattr(runtime, "cuda_problem", lambda: "the CUDA driver reports no device (0 devices)")
    assert runtime.tensorrt_installed()
    assert runtime.tensorrt_problem.__wrapped__() == "the CUDA driver reports no device (0 devices)"


def test_the_gpu_name_keys_the_engine_cache(monkeypatch):
    """The name the driver gives device 0 (``cuDeviceGetName``), "" without a device."""
    class Driver:
        def cuDeviceGetName(self, buffer, size, index):  # noqa: N802 - the driver's name
            buffer.value = b"NVIDIA H200"
            return 0

    monkeypatch.setattr(runtime, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(runtime.ctypes, "CDLL", lambda name: Driver())
    assert runtime.cuda_device_name.__wrapped__() == "NVIDIA H200"
    monkeypatch.setattr(runtime, "cuda_device_count", lambda: 0)
    assert runtime.cuda_device_name.__wrapped__() == ""
