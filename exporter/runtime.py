"""ONNX Runtime sessions for graph mode: providers chosen quietly, threads sized to the machine."""

from __future__ import annotations

import os

import onnx
import onnxruntime as ort


def cuda_usable() -> bool:
    """Whether the CUDA provider can really run here (built in, and a GPU visible)."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    from flowserve.device import cuda

    return cuda.is_available() or _nvidia_device_present()


def _nvidia_device_present() -> bool:
    return os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia/version")


def providers(device: str = "auto") -> list:
    if device == "cpu" or (device == "auto" and not cuda_usable()):
        return ["CPUExecutionProvider"]
    return [("CUDAExecutionProvider", {}), "CPUExecutionProvider"]


def session_options(*, graph_mode: bool = False, threads: int | None = None, options: dict | None = None):
    so = ort.SessionOptions()
    so.log_severity_level = 3  # errors only: no provider fallback noise
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads or os.cpu_count() or 1
    if graph_mode:
        # graph mode shares the cores with eager numpy: spinning threads would slow both
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options = options or {}
    if options.get("compress_memory"):
        so.enable_mem_pattern = True
        so.enable_mem_reuse = True
    if options.get("straighten_algorithm"):
        so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    return so


def create_session(model: onnx.ModelProto | bytes | str, *, device: str = "auto", graph_mode: bool = False,
                   threads: int | None = None, options: dict | None = None) -> ort.InferenceSession:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return ort.InferenceSession(data, sess_options=session_options(graph_mode=graph_mode, threads=threads,
                                                                   options=options),
                                providers=providers(device))
