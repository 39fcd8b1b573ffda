"""OpenVINO as the engine that runs a flowserve ONNX model (``pip install "flowserve[openvino]"``).

Two routes, tried in this order (``flowserve.onnx_backend.providers.create_session`` takes them):

1. ONNX Runtime's OpenVINO execution provider plugin (the ``onnxruntime-ep-openvino``
   package): registered with ONNX Runtime once per process, used where it lists a device.
   The session is an ordinary ``onnxruntime.InferenceSession``.
2. OpenVINO's own runtime (the ``openvino`` package) reading the same ONNX bytes, behind
   :class:`OpenVINOSession`, which answers the part of ``InferenceSession``'s interface
   that graph mode and the server use (``run``, ``io_binding``, ``run_with_iobinding``,
   ``get_inputs``/``get_outputs``, ``get_providers``).

Both compile for the CPU in float32 (``INFERENCE_PRECISION_HINT=f32``: OpenVINO would
otherwise pick bfloat16 on CPUs that have it, which changes results beyond eager's
tolerance) with a latency hint and the thread count graph mode asks for.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import importlib.util
import json
import threading
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from flowserve.errors import GraphError

PLUGIN_EP = "OpenVINOExecutionProvider"
RUNTIME_PROVIDER = "OpenVINO"  # what an OpenVINOSession's get_providers() names
INSTALL_HINT = 'pip install "flowserve[openvino]"'


def cpu_config(threads: int | None) -> dict:
    config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = str(int(threads))
    return config


def plugin_devices() -> list:
    """ONNX Runtime's OpenVINO plugin devices (registering the plugin library if it is
    installed and not registered yet); ``[]`` where the plugin is absent or lists none."""
    try:
        import onnxruntime_ep_openvino as plugin  # local: the optional OpenVINO plugin, probed when asked
    except ImportError:
        return []
    if not hasattr(ort, "get_ep_devices"):  # ONNX Runtime before plugin execution providers
        return []
    if not any(d.ep_name == PLUGIN_EP for d in ort.get_ep_devices()):
        try:
            ort.register_execution_provider_library(PLUGIN_EP, plugin.get_library_path())
        except Exception:  # a plugin built for another ONNX Runtime: the second route remains
            return []
    return [d for d in ort.get_ep_devices() if d.ep_name == PLUGIN_EP]


def runtime_available() -> bool:
    try:
        import openvino  # noqa: F401  # local: OpenVINO is optional, probed when asked
    except ImportError:
        return False
    return True


def version() -> str | None:
    """The installed OpenVINO's version (from its package metadata: importing OpenVINO
    takes seconds), else None."""
    try:
        return importlib.metadata.version("openvino")
    except importlib.metadata.PackageNotFoundError:
        return None


def installed() -> bool:
    """Whether either route is installed, without importing it (which takes seconds):
    graph mode's engine choice asks at every first call."""
    return any(importlib.util.find_spec(name) is not None for name in ("openvino", "onnxruntime_ep_openvino"))


def available() -> bool:
    """Whether either route can run a model here."""
    return bool(plugin_devices()) or runtime_available()


def problem() -> str | None:
    """Why OpenVINO cannot run a model here (one line), or None where it can."""
    if available():
        return None
    return f"neither ONNX Runtime's OpenVINO plugin nor OpenVINO's runtime is installed ({INSTALL_HINT})"


def add_plugin(session_options: ort.SessionOptions, threads: int | None) -> bool:
    """Put ONNX Runtime's OpenVINO plugin into ``session_options`` where it lists a device
    (``flowserve/onnx_backend/runtime.py`` then builds the ``InferenceSession``); False where it does not."""
    devices = plugin_devices()
    if devices:
        load_config = json.dumps({"CPU": cpu_config(threads)})
        session_options.add_provider_for_devices(devices[:1], {"load_config": load_config})
    return bool(devices)


def runtime_session(data: bytes | str, threads: int | None) -> "OpenVINOSession":
    """The model ``data`` (bytes or a path) compiled by OpenVINO's own runtime."""
    if not runtime_available():
        raise GraphError(f"execution provider 'openvino' needs OpenVINO: {INSTALL_HINT}")
    return OpenVINOSession(data, threads)


@dataclass
class _Arg:
    """What ``get_inputs()``/``get_outputs()`` give: a name, a shape, a type string."""

    name: str
    shape: list
    type: str


class OpenVINOSession:
    """An ONNX model compiled by OpenVINO's runtime, with ``InferenceSession``'s interface."""

    def __init__(self, data: bytes | str, threads: int | None = None):
        import openvino as ov  # local: optional dependency, the [openvino] extra

        self._ov = ov
        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(data), "CPU", cpu_config(threads))
        self.request = self.compiled.create_infer_request()
        proto = onnx.load(data, load_external_data=False) if isinstance(data, str) else onnx.load_from_string(data)
        graph = proto.graph  # the ONNX names: OpenVINO may list others first
        self._inputs = [v.name for v in graph.input if v.name not in {i.name for i in graph.initializer}]
        self._outputs = [v.name for v in graph.output]
        self._ports = {name: _port(self.compiled.outputs, name) for name in self._outputs}

    def get_providers(self) -> list:
        return [RUNTIME_PROVIDER]

    def get_inputs(self) -> list:
        return [_Arg(name, _shape(p), _type(p)) for name in self._inputs for p in [_port(self.compiled.inputs, name)]]

    def get_outputs(self) -> list:
        return [_Arg(name, _shape(self._ports[name]), _type(self._ports[name])) for name in self._outputs]

    def run(self, output_names, feeds: dict, run_options=None) -> list:
        results = self._infer(feeds)
        return [np.array(results[name]) for name in (output_names or self._outputs)]

    def _infer(self, feeds: dict) -> dict:
        missing = [name for name in self._inputs if name not in feeds]
        if missing:
            raise GraphError(f"OpenVINO session expected inputs {self._inputs}, missing {missing}")
        tensors = {name: self._ov.Tensor(_contiguous(feeds[name]), shared_memory=True) for name in self._inputs}
        self.request.infer(tensors)
        return {name: self.request.get_tensor(port).data for name, port in self._ports.items()}

    def run_within(self, output_names, feeds: dict, seconds: float) -> list | None:
        """``run(output_names, feeds)``, cancelled after ``seconds``: None when cancelled."""
        missing = [name for name in self._inputs if name not in feeds]
        if missing:
            raise GraphError(f"OpenVINO session expected inputs {self._inputs}, missing {missing}")
        self.request.start_async({name: self._ov.Tensor(_contiguous(feeds[name]), shared_memory=True)
                                  for name in self._inputs})
        if not self.request.wait_for(max(1, int(seconds * 1000))):
            self.request.cancel()  # takes effect between kernels: a thread waits out the current one
            background(_wait_quietly, self.request)
            self.request = self.compiled.create_infer_request()
            return None
        return [np.array(self.request.get_tensor(self._ports[name]).data) for name in (output_names or self._outputs)]

    def io_binding(self) -> "_Binding":
        return _Binding(self)

    def run_with_iobinding(self, binding: "_Binding", run_options=None) -> None:
        results = self._infer(binding.inputs)
        binding.results = results
        for name, target in binding.outputs.items():
            if target is not None:
                target.update_inplace(_contiguous(results[name]))


class _Binding:
    """``SessionIOBinding``'s calls that graph mode makes, for :class:`OpenVINOSession`."""

    def __init__(self, session: OpenVINOSession):
        self.session, self.inputs, self.outputs, self.results = session, {}, {}, {}

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        self.inputs[name] = array

    def bind_ortvalue_output(self, name: str, value) -> None:
        self.outputs[name] = value

    def bind_output(self, name: str, *args) -> None:
        self.outputs[name] = None

    def copy_outputs_to_cpu(self) -> list:
        return [np.array(self.results[name]) for name in self.outputs]


class _Background:
    """Threads left running (a cancelled inference finishing its kernel, an engine compile
    past its budget), joined when the interpreter exits: native threads still running at
    exit abort the process ("terminate called without an active exception")."""

    def __init__(self):
        self.threads: list = []
        atexit.register(self.join)

    def __call__(self, target, *args) -> threading.Thread:
        self.threads = [t for t in self.threads if t.is_alive()]
        thread = threading.Thread(target=target, args=args, daemon=True, name="flowserve-background")
        self.threads.append(thread)
        thread.start()
        return thread

    def join(self) -> None:
        for thread in self.threads:
            thread.join()


background = _Background()


def _wait_quietly(request) -> None:
    try:
        request.wait()
    except RuntimeError:  # "Infer Request was canceled"
        pass


def _contiguous(array) -> np.ndarray:
    """C-contiguous, keeping 0-d arrays 0-d (``np.ascontiguousarray`` makes them 1-d)."""
    array = np.asarray(array)
    return array if array.flags.c_contiguous else array.copy(order="C")


def _port(ports, name: str):
    for port in ports:
        if name in port.get_names():
            return port
    raise GraphError(f"OpenVINO's compiled model has no port named {name!r}")


def _shape(port) -> list:
    return [d.get_length() if d.is_static else None for d in port.get_partial_shape()]


def _type(port) -> str:
    return f"tensor({port.get_element_type().get_type_name()})"
