"""The one ONNX Runtime module: CUDA and TensorRT detection, the CUDA provider's options,
session options and the ``InferenceSession`` constructor, for graph mode, the exporter's
checks and the server alike. Which engine runs a model is the provider table's
(``flowserve.onnx_backend.providers``: cpu, cuda, tensorrt, openvino), whose
``create_session`` makes sessions with this module's pieces.

CUDA is chosen only when onnxruntime has the CUDA provider *and* the CUDA driver reports a
device (one quiet probe), so a CPU-only machine never sees provider-fallback errors::

    session = providers.create_session(model_proto, device="auto")

``flow.backends``' switches reach every session made here through ``engine_flags``:
``use_deterministic_compute`` in the session options, ``cudnn_conv_algo_search`` and
``use_tf32`` in the CUDA provider's options (``cuda_provider_options``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import io
import logging
import os
import threading

import numpy as np
import onnx
import onnxruntime as ort

from flowserve.backends import engine_flags
from flowserve.errors import DeviceError
from flowserve.onnx_backend import openvino
from flowserve.utils.cpus import usable_cpus

CUDA_PROVIDER = "CUDAExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"
NCHWC_DOMAIN = "com.microsoft.nchwc"
CPU_PROVIDER = "CPUExecutionProvider"
DEVICES = ("auto", "cpu", "cuda")
# what onnxruntime-gpu 1.31's TensorRT provider links: TensorRT 10 (pip install "flowserve[tensorrt]")
TENSORRT_LIBRARIES = ("libnvinfer.so.10", "libnvonnxparser.so.10")
TENSORRT_PACKAGE = "tensorrt_libs"  # the folder tensorrt-cu13-libs installs them in
_QUIET = 3  # ORT severity: 0 verbose .. 3 error, 4 fatal
LOG = logging.getLogger("flowserve.runtime")


@functools.lru_cache(maxsize=1)
def cuda_device_count() -> int:
    """CUDA devices the driver reports (0 without a driver); never logs."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def cuda_usable() -> bool:
    """Whether onnxruntime can run on a GPU here (provider built in, a device visible, the
    provider's library loading)."""
    return cuda_problem() is None


@functools.lru_cache(maxsize=1)
def cuda_problem() -> str | None:
    """Why onnxruntime cannot run on a GPU here (one line), or None where it can. Probed
    once: the CUDA provider, a device the driver reports, then the provider's library
    loaded with its CUDA and cuDNN libraries (where a missing one is named)."""
    if CUDA_PROVIDER not in ort.get_available_providers():
        return f"onnxruntime has no CUDA provider (providers {ort.get_available_providers()}; pip install \"flowserve[cuda]\")"
    if cuda_device_count() == 0:
        return "the CUDA driver reports no device (0 devices)"
    _load_cuda_libraries()
    library = os.path.join(os.path.dirname(ort.__file__), "capi", "libonnxruntime_providers_cuda.so")
    if os.path.isfile(library):  # Linux wheels; elsewhere the session's start-up says it
        try:
            ctypes.CDLL(library)
        except OSError as exc:
            return f"its CUDA provider does not load ({' '.join(str(exc).split())}; pip install \"flowserve[cuda]\")"
    return None


@functools.lru_cache(maxsize=1)
def cuda_device_name() -> str:
    """The first CUDA device's name as the driver reports it ("" without one)."""
    if cuda_device_count() == 0:
        return ""
    libcuda = ctypes.CDLL("libcuda.so.1")
    name = ctypes.create_string_buffer(256)
    if libcuda.cuDeviceGetName(name, len(name), 0) != 0:
        return ""
    return name.value.decode(errors="replace")


def cuda_installed() -> bool:
    """Whether this onnxruntime has its CUDA provider (onnxruntime-gpu), usable or not."""
    return CUDA_PROVIDER in ort.get_available_providers()


def tensorrt_installed() -> bool:
    """Whether onnxruntime has its TensorRT provider and TensorRT's libraries are installed
    by pip (the ``tensorrt_libs`` folder), without loading them."""
    return TENSORRT_PROVIDER in ort.get_available_providers() and importlib.util.find_spec(TENSORRT_PACKAGE) is not None


@functools.lru_cache(maxsize=1)
def tensorrt_problem() -> str | None:
    """Why onnxruntime's TensorRT provider cannot run here (one line), or None where it
    can: the provider, TensorRT 10's libraries loaded (from pip's ``tensorrt_libs`` where
    installed, else the loader's path), then a usable CUDA provider. Probed once."""
    if TENSORRT_PROVIDER not in ort.get_available_providers():
        return f"onnxruntime has no TensorRT provider (providers {ort.get_available_providers()}; install onnxruntime-gpu)"
    _load_cuda_libraries()  # pip's CUDA libraries first: TensorRT's load after them
    spec = importlib.util.find_spec(TENSORRT_PACKAGE)
    folder = next(iter(spec.submodule_search_locations or ()), "") if spec is not None else ""
    for name in TENSORRT_LIBRARIES:
        path = os.path.join(folder, name) if folder and os.path.isfile(os.path.join(folder, name)) else name
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            return f"TensorRT 10's {name} does not load ({' '.join(str(exc).split())})"
    return cuda_problem()


@functools.lru_cache(maxsize=1)
def _load_cuda_libraries() -> None:
    """Load the CUDA and cuDNN libraries that pip's ``nvidia-*`` packages hold (what
    ``pip install flowserve[cuda]`` brings), once, before the first CUDA session: the CUDA
    provider finds them only where the loader was told (ONNX Runtime's ``preload_dlls``;
    libraries a CUDA toolkit or ``import torch`` already loaded stay as they are). What it
    prints goes to the debug log."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:  # onnxruntime before 1.21: the loader's own search path only
        return
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            preload()
    except Exception as exc:  # a library that fails to load: the session then says which
        printed.write(f"{type(exc).__name__}: {exc}")
    if printed.getvalue().strip():
        LOG.debug("onnxruntime.preload_dlls: %s", " ".join(printed.getvalue().split()))


def choose_providers(device: str = "auto", options: dict | None = None) -> list:
    """Execution providers for ``device`` ("auto", "cpu" or "cuda"); the CUDA provider's
    options come from ``cuda_provider_options`` (``flow.backends`` and an nn.Graph's config
    ``options``). Raises ``DeviceError`` for an unknown device
    or for "cuda" where no GPU is usable."""
    if device not in DEVICES:
        raise DeviceError(f"device: expected 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "cpu":
        return [CPU_PROVIDER]
    if not cuda_usable():
        problem = cuda_problem() or "cuda_usable() is False"
        if device == "cuda":
            raise DeviceError(f"device 'cuda' asked for, but no CUDA device is usable by onnxruntime: {problem}")
        if cuda_device_count() > 0 and CUDA_PROVIDER in ort.get_available_providers():
            _warn_once(f"a CUDA GPU is visible but onnxruntime cannot use it: {problem}; running on the CPU")
        return [CPU_PROVIDER]
    return [(CUDA_PROVIDER, cuda_provider_options(options)), CPU_PROVIDER]


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    LOG.warning(message)


def cuda_provider_options(options: dict | None = None) -> dict:
    """The CUDA provider's options: ``flow.backends.cudnn.benchmark`` picks the convolution
    algorithm search (``EXHAUSTIVE`` when True, else ``HEURISTIC``) unless an nn.Graph's
    ``enable_cudnn_conv_heuristic_search_algo`` says otherwise; TF32 only where both
    ``cuda.matmul.allow_tf32`` and ``cudnn.allow_tf32`` allow it."""
    flags = engine_flags()
    search = flags["cudnn_conv_algo_search"]
    heuristic = (options or {}).get("cudnn_conv_heuristic_search_algo")
    if heuristic is not None:
        search = "HEURISTIC" if heuristic else "EXHAUSTIVE"
    return {"cudnn_conv_algo_search": search, "use_tf32": "1" if flags["use_tf32"] else "0"}


# nn.Graph's straighten modes -> ONNX Runtime's execution order. ORT's default topological
# order keeps fewer tensors alive at once (measured on a resnet18 training step: +268 MiB
# against +332 MiB for the priority-based order, which favours speed).
_EXECUTION_ORDER = {"Disable": "DEFAULT", "MemoryFirst": "DEFAULT", "SpeedFirst": "PRIORITY_BASED",
                    "OverlapCpuGpu": "PRIORITY_BASED", "DelayShortGpu": "PRIORITY_BASED"}


def session_options(*, instances: int = 1, threads: int = 0, options: dict | None = None) -> ort.SessionOptions:
    """Options for one of ``instances`` sessions sharing the cores (``threads`` overrides
    the share). Threads do not spin: sessions share the cores with eager numpy and with
    each other; ``flow.backends``' deterministic switch sets ``use_deterministic_compute``.
    ``options`` are an nn.Graph's config options: ``straighten_algorithm``
    picks the execution order, ``compress_memory`` returns memory to the system as soon
    as tensors die (no arena caching freed blocks), ``thread_spinning`` lets the threads
    spin between operators (``config.allow_thread_spinning``: faster on cores of one's own,
    slower on busy shared ones)."""
    so = ort.SessionOptions()
    so.log_severity_level = _QUIET  # errors only: no provider fallback noise
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads or max(1, usable_cpus() // max(1, instances))
    so.inter_op_num_threads = 1
    so.use_deterministic_compute = engine_flags()["deterministic"]  # flow.use_deterministic_algorithms
    options = options or {}
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if options.get("thread_spinning") else "0")
    if options.get("compress_memory"):
        so.enable_cpu_mem_arena = False
        so.enable_mem_reuse = True
    mode = options.get("straighten_algorithm")
    if mode:
        so.execution_order = getattr(ort.ExecutionOrder, _EXECUTION_ORDER.get(mode, "DEFAULT"))
    return so


@functools.lru_cache(maxsize=1)
def nchwc_block_size() -> int:
    """The channel block of ONNX Runtime's NCHWc kernels on this CPU (MLAS's
    ``MlasNchwcGetBlockSize``: 16 with AVX-512, 8 with AVX2), or 0 where this build has no
    ``com.microsoft.nchwc`` operators. Read from the channels ``ReorderInput`` pads 4 to."""
    node = onnx.helper.make_node("ReorderInput", ["x"], ["y"], domain=NCHWC_DOMAIN)
    graph = onnx.helper.make_graph(
        [node], "probe", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 1, 1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17),
                                                         onnx.helper.make_opsetid(NCHWC_DOMAIN, 1)], ir_version=8)
    so = ort.SessionOptions()
    so.log_severity_level = 4  # fatal only: a build without the kernels is an answer, not an error
    so.intra_op_num_threads = 1
    try:
        session = ort.InferenceSession(model.SerializeToString(), sess_options=so, providers=[CPU_PROVIDER])
        (out,) = session.run(None, {"x": np.ones((1, 4, 1, 1), np.float32)})
    except Exception:  # no NCHWc kernels in this build or on this CPU
        return 0
    block = int(out.shape[1])
    return block if block > 1 and (block & (block - 1)) == 0 else 0


def start_session(data, so: ort.SessionOptions, providers: list | None):
    """ONNX Runtime's ``InferenceSession`` of ``data`` on ``providers`` (None: those
    ``so`` holds, an execution provider plugin's)."""
    if providers is None:
        return ort.InferenceSession(data, sess_options=so)
    return ort.InferenceSession(data, sess_options=so, providers=providers)


def start_gpu_session(data, so: ort.SessionOptions, providers: list, *, required: bool):
    """A session on a GPU provider (``providers[0]``: CUDA, or TensorRT before CUDA). Where
    the provider does not start (a CUDA, cuDNN or TensorRT library missing, a driver too
    old) but the model loads on the CPU, ``required`` (device "cuda", provider "tensorrt")
    raises a one-line ``DeviceError``; else ("auto") the session runs on the CPU and one
    warning per process says why (a server makes a session per batch size and instance).
    ONNX Runtime's own fallback (a printed banner) is off; a model that loads nowhere
    raises ONNX Runtime's error."""
    first = providers[0][0] if isinstance(providers[0], tuple) else providers[0]
    try:
        session = ort.InferenceSession(data, sess_options=so, providers=providers, enable_fallback=0)
    except Exception as exc:
        gpu_error = exc
        session = None
    else:
        if first in session.get_providers():
            return session
        gpu_error = f"onnxruntime left it out (providers taken: {session.get_providers()})"
    try:
        session = ort.InferenceSession(data, sess_options=so, providers=[CPU_PROVIDER])
    except Exception:
        if isinstance(gpu_error, Exception):
            raise gpu_error from None  # not the provider: the model itself fails to load
        raise
    why = " ".join(str(gpu_error).split())[:300]
    if required:
        raise DeviceError(f"{first} did not start: {why}")
    _warn_once(f"{first} did not start ({why}); running on the CPU")
    return session


def ort_value(array: np.ndarray) -> ort.OrtValue:
    """``array`` as an ``OrtValue`` sharing its memory: graph mode binds its state and output
    buffers with these, so ONNX Runtime writes results in place."""
    return ort.OrtValue.ortvalue_from_numpy(array)


def engine_versions() -> dict:
    """The versions of the engines a graph may run on (None where one is not installed)."""
    return {"onnxruntime": ort.__version__, "openvino": openvino.version()}


def run_within(session, names: list, feeds: dict, seconds: float) -> list | None:
    """``session.run(names, feeds)`` cut off after ``seconds``: None when cut off.
    OpenVINO's own runtime runs asynchronously and is cancelled; an ONNX Runtime session
    is stopped by its run options' ``terminate`` flag."""
    if isinstance(session, openvino.OpenVINOSession):
        return session.run_within(names, feeds, seconds)
    options = ort.RunOptions()
    timer = threading.Timer(seconds, lambda: setattr(options, "terminate", True))
    timer.start()
    try:
        return session.run(names, feeds, options)
    except Exception:
        if options.terminate:
            return None
        raise
    finally:
        timer.cancel()
