"""The execution providers: one table that graphs, the exporter and the server read.

One vocabulary names them everywhere (``config.set_execution_provider``, ``flowserve
serve --provider``, ``create_session(provider=...)``):

========== ======================================= ======== ======== ===========================
name       ONNX Runtime provider(s)                devices  trains   installs with
========== ======================================= ======== ======== ===========================
cpu        CPUExecutionProvider                    cpu      yes      (always there)
cuda       CUDAExecutionProvider                   cuda     yes      pip install "flowserve[cuda]"
tensorrt   TensorrtExecutionProvider (then CUDA)   cuda     no       pip install "flowserve[tensorrt]"
openvino   OpenVINOExecutionProvider (plugin)      cpu      yes      pip install "flowserve[openvino]"
========== ======================================= ======== ======== ===========================

and two choices: ``"onnxruntime"`` is ONNX Runtime's best provider here (cuda where usable,
else cpu: the server's default); ``"auto"`` is the fastest usable one: for a graph, ONNX
Runtime's best measured against OpenVINO where installed
(``flowserve.nn.graph.provider_choice``); for the server, tensorrt where usable, else what
``"onnxruntime"`` picks, with one warning saying why. A new engine is one entry here.

>>> PROVIDERS["tensorrt"].install
'pip install "flowserve[tensorrt]"'
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable

import onnx
import onnxruntime as ort

from flowserve.errors import DeviceError
from flowserve.onnx_backend import openvino, runtime

LOG = logging.getLogger("flowserve.runtime")
AUTO, ONNXRUNTIME = "auto", "onnxruntime"  # the two choices beside the table's names


@dataclass(frozen=True)
class Provider:
    """One engine a model runs on. ``ort_providers(options)``: the list ONNX Runtime's
    session takes (None: the engine makes its own session, ``make_session``);
    ``problem()``: why it cannot run here (one line), None where it can; ``installed()``:
    whether it is installed at all, without importing it (both look the probe up when
    called, in ``runtime`` or ``openvino``)."""

    name: str
    ort_names: tuple  # ONNX Runtime's names of the provider, the first its own
    devices: tuple  # where it runs: "cpu", "cuda"
    trains: bool  # runs training graphs (else it serves only)
    microsoft_ops: bool  # runs com.microsoft kernels (the exporter's "onnxruntime" target)
    session_per_shape: bool  # served batches take a session per batch size (cuDNN plans one shape)
    measured_by_auto: bool  # a graph's "auto" measures it against ONNX Runtime
    extra: str  # the pip extra that installs it ("": always installed)
    problem: Callable[[], str | None]
    installed: Callable[[], bool]
    ort_providers: Callable[[dict], list] | None = None
    make_session: Callable | None = None  # (data, session options) -> session, where ort_providers is None
    serving_options: Callable | None = None  # (model, max_batch_size) -> create_session's options, served

    @property
    def install(self) -> str:
        return f'pip install "flowserve[{self.extra}]"' if self.extra else ""

    @property
    def device(self) -> str:
        return self.devices[0]


def _openvino_session(data, so):
    """ONNX Runtime's OpenVINO plugin where it lists a device, else OpenVINO's own runtime."""
    if not openvino.add_plugin(so, so.intra_op_num_threads):
        return openvino.runtime_session(data, so.intra_op_num_threads)
    return runtime.start_session(data, so, None)


def _tensorrt_providers(options: dict) -> list:
    """TensorRT first, CUDA for the nodes TensorRT does not take, the CPU last."""
    return [(runtime.TENSORRT_PROVIDER, dict(options.get("tensorrt") or {}))] + runtime.choose_providers("cuda", options)


_ENTRIES = (
    Provider("cpu", (runtime.CPU_PROVIDER,), ("cpu",), trains=True, microsoft_ops=True,
             session_per_shape=False, measured_by_auto=False, extra="",
             problem=lambda: None, installed=lambda: True,
             ort_providers=lambda options: [runtime.CPU_PROVIDER]),
    Provider("cuda", (runtime.CUDA_PROVIDER,), ("cuda",), trains=True, microsoft_ops=True,
             session_per_shape=True, measured_by_auto=False, extra="cuda",
             problem=lambda: runtime.cuda_problem(), installed=lambda: runtime.cuda_installed(),
             ort_providers=lambda options: runtime.choose_providers("cuda", options)),
    Provider("tensorrt", (runtime.TENSORRT_PROVIDER,), ("cuda",), trains=False, microsoft_ops=True,
             session_per_shape=False, measured_by_auto=False, extra="tensorrt",
             problem=lambda: runtime.tensorrt_problem(), installed=lambda: runtime.tensorrt_installed(),
             ort_providers=_tensorrt_providers,
             serving_options=lambda model, max_batch_size: {"tensorrt": tensorrt_options_for(model, max_batch_size)}),
    Provider("openvino", (openvino.PLUGIN_EP, openvino.RUNTIME_PROVIDER), ("cpu",), trains=True, microsoft_ops=False,
             session_per_shape=False, measured_by_auto=True, extra="openvino",
             problem=lambda: openvino.problem(), installed=lambda: openvino.installed(),
             make_session=_openvino_session),
)
PROVIDERS = MappingProxyType({p.name: p for p in _ENTRIES})
NAMES = (AUTO, ONNXRUNTIME) + tuple(PROVIDERS)  # every spelling a user may write
GRAPH_NAMES = (AUTO,) + tuple(p.name for p in _ENTRIES if p.trains)  # what nn.Graph runs on
SERVING_AUTO = ("tensorrt",)  # what the server's "auto" tries, in order, before "onnxruntime"


def check(name: str, *, graph: bool = False) -> str:
    """``name`` where it is one of the vocabulary (a graph's: providers that train), else a
    one-line ``ValueError`` naming what is expected."""
    expected = GRAPH_NAMES if graph else NAMES
    if name in expected:
        return name
    if graph and name in PROVIDERS:
        raise ValueError(f"execution provider {name!r} serves only (flowserve serve --provider {name}); "
                         f"a graph runs on one of {', '.join(expected)}")
    raise ValueError(f"execution provider: expected one of {', '.join(expected)}, got {name!r}")


def of_session(session) -> Provider:
    """The table's entry of the provider ``session`` runs on first."""
    taken = getattr(session, "get_providers", list)()[:1]
    return next((p for p in _ENTRIES if taken and taken[0] in p.ort_names), PROVIDERS["cpu"])


def onnxruntime_name(device_type: str) -> str:
    """ONNX Runtime's own provider for tensors on ``device_type`` ("cpu" or "cuda")."""
    return "cuda" if device_type == "cuda" else "cpu"


def onnxruntime_best(device: str = AUTO) -> Provider:
    """ONNX Runtime's provider for ``device`` ("auto": cuda where usable, else cpu)."""
    providers = runtime.choose_providers(device)  # a one-line DeviceError for an unusable "cuda"
    return PROVIDERS["cuda"] if providers[0] != runtime.CPU_PROVIDER else PROVIDERS["cpu"]


def export_target(name: str) -> str:
    """The exporter's target (``flowserve.exporter.fused.TARGETS``) for a model served on
    provider ``name``: ONNX Runtime's ``com.microsoft`` fused kernels where every provider
    ``name`` may pick runs them, else portable ONNX."""
    entry = PROVIDERS.get(check(name))
    return "portable" if entry is not None and not entry.microsoft_ops else "onnxruntime"


def for_device(name: str, device: str = AUTO) -> Provider:
    """The entry a session of provider ``name`` on ``device`` runs on (a graph's "auto":
    ONNX Runtime's best, which ``provider_choice`` may then replace)."""
    name = check(name)
    if name in (AUTO, ONNXRUNTIME):
        return onnxruntime_best(device)
    return PROVIDERS[name]


def for_serving(name: str, device: str = AUTO) -> Provider:
    """The entry ``flowserve serve --provider name --device device`` serves on: an explicit
    provider that cannot run here is a one-line ``DeviceError`` naming what to install;
    "auto" takes TensorRT where usable, else (one warning) what "onnxruntime" takes."""
    name = check(name)
    if name == ONNXRUNTIME or (name == AUTO and device == "cpu"):
        return onnxruntime_best(device)
    if name == AUTO:
        return _serving_auto(device)
    entry = PROVIDERS[name]
    if device not in (AUTO, *entry.devices):
        raise DeviceError(f"--provider {name}: expected --device {' or '.join((AUTO,) + entry.devices)}, "
                          f"got --device {device}")
    problem = entry.problem()
    if problem is not None:
        raise DeviceError(f"--provider {name}: expected {name} usable by onnxruntime, got: {problem}"
                          + (f"; {entry.install}" if entry.install and entry.install not in problem else ""))
    return entry


def _serving_auto(device: str) -> Provider:
    """The first usable of ``SERVING_AUTO`` on ``device``, else ONNX Runtime's best, with
    one warning naming why each was passed over and what installs it."""
    passed = []
    for entry in (PROVIDERS[n] for n in SERVING_AUTO):
        problem = entry.problem() if device in (AUTO, *entry.devices) else f"--device {device}"
        if problem is None:
            return entry
        passed.append(f"{entry.name} is not usable here ({problem}; {entry.install})")
    chosen = onnxruntime_best(device)
    _warn_once(f"--provider auto: {', '.join(passed)}; serving on {chosen.name}")
    return chosen


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    LOG.warning(message)


def create_session(model: onnx.ModelProto | bytes | str, *, device: str = AUTO, instances: int = 1,
                   threads: int = 0, options: dict | None = None, provider: str | Provider | None = None,
                   required: bool = False):
    """A session of ``model`` (a proto, its bytes, or a path) on ``provider`` (a name or an
    entry; else an nn.Graph's ``options["execution_provider"]``, else "auto": ONNX Runtime
    on ``device``). ``options``: an nn.Graph's config options, ``"tensorrt"`` the TensorRT
    provider's options (``tensorrt_options``). A GPU provider that does not start is a
    one-line ``DeviceError`` where it was asked for (``required``, device "cuda", or a
    provider named), else the session runs on the CPU after one warning."""
    options = options or {}
    if isinstance(provider, Provider):
        entry = provider
    else:
        name = check(provider or options.get("execution_provider", AUTO))
        entry, required = for_device(name, device), required or name not in (AUTO, ONNXRUNTIME)
    # a path stays a path: the engines resolve external data against its directory
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    so = runtime.session_options(instances=instances, threads=threads, options=options)
    if entry.ort_providers is None:
        return entry.make_session(data, so)
    providers = entry.ort_providers(options)
    if entry.device == "cpu":
        return runtime.start_session(data, so, providers)
    return runtime.start_gpu_session(data, so, providers, required=required or device == "cuda")


def runs_on_cpu_provider(options: dict | None = None, device: str = AUTO) -> bool:
    """Whether ``create_session(..., device=device, options=options)`` runs on ONNX
    Runtime's CPU provider (not CUDA, not OpenVINO)."""
    name = check((options or {}).get("execution_provider", AUTO))
    if name in (AUTO, ONNXRUNTIME):
        return device == "cpu" or not runtime.cuda_usable()
    return name == "cpu"


# -- TensorRT's options: fp16, engine and timing caches, one optimisation profile ---------------


def cache_root() -> Path:
    """Where flowserve caches what it measured or built (``FLOWSERVE_CACHE_DIR``, else
    ``~/.cache/flowserve``)."""
    return Path(os.environ.get("FLOWSERVE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "flowserve"))


def tensorrt_version() -> str | None:
    """The installed TensorRT libraries' version (package metadata), else None."""
    for package in ("tensorrt-cu13-libs", "tensorrt-cu12-libs", "tensorrt"):
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def tensorrt_cache_dir(model_bytes: bytes, max_batch_size: int, *, root: Path, gpu: str, versions: dict) -> Path:
    """The engine and timing cache folder of a model: keyed by the model's SHA-256, the
    profile's largest batch, the GPU and the engines' versions (an engine built for one of
    them does not load on another)."""
    digest = hashlib.sha256(model_bytes)
    digest.update(json.dumps({"max_batch_size": max_batch_size, "gpu": gpu, **versions}, sort_keys=True).encode())
    return Path(root) / "tensorrt" / digest.hexdigest()[:32]


def _profile(inputs: list, batch: int) -> str | None:
    """TensorRT's shape string (``x:8x3x224x224,mask:8x16``) at ``batch``, or None where a
    dimension other than the batch is free (no one profile covers it)."""
    shapes = []
    for name, dims in inputs:
        if any(not isinstance(d, int) or d < 0 for d in dims[1:]):
            return None
        first = dims[0] if dims and isinstance(dims[0], int) and dims[0] > 0 else batch
        shapes.append(f"{name}:" + "x".join(str(d) for d in (first, *dims[1:])))
    return ",".join(shapes)


def tensorrt_options(inputs: list, max_batch_size: int, cache_dir: Path | str) -> dict:
    """ONNX Runtime's TensorRT provider options for a served model whose graph inputs are
    ``inputs`` (``(name, dims)``, a dim an int, or a str/None/-1 where free): fp16, the
    engine and timing caches in ``cache_dir``, and one optimisation profile from batch 1
    to ``max_batch_size`` (optimised for the largest), where only the batch is free."""
    cache = str(cache_dir)
    options = {"trt_fp16_enable": "1", "trt_engine_cache_enable": "1", "trt_engine_cache_path": cache,
               "trt_timing_cache_enable": "1", "trt_timing_cache_path": cache}
    low, high = _profile(inputs, 1), _profile(inputs, max(1, max_batch_size))
    if inputs and low is not None:
        options.update(trt_profile_min_shapes=low, trt_profile_opt_shapes=high, trt_profile_max_shapes=high)
    return options


def model_inputs(model: onnx.ModelProto) -> list:
    """``(name, dims)`` of ``model``'s graph inputs (initializers left out): an int per
    known dimension, the dimension's name (or None) where it is free."""
    initializers = {i.name for i in model.graph.initializer}
    return [(v.name, [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                      for d in v.type.tensor_type.shape.dim])
            for v in model.graph.input if v.name not in initializers]


def tensorrt_options_for(model: onnx.ModelProto, max_batch_size: int) -> dict:
    """``tensorrt_options`` for ``model`` on this machine: the cache under ``cache_root()``
    keyed by the model, this GPU and the versions of ONNX Runtime and TensorRT."""
    versions = {"onnxruntime": ort.__version__, "tensorrt": tensorrt_version()}
    folder = tensorrt_cache_dir(model.SerializeToString(), max_batch_size, root=cache_root(),
                                gpu=runtime.cuda_device_name(), versions=versions)
    folder.mkdir(parents=True, exist_ok=True)
    return tensorrt_options(model_inputs(model), max_batch_size, folder)
