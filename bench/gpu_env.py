"""What a GPU machine offers flowserve: versions, onnxruntime's providers, CuPy, and one
session on the CUDA provider (``bench/gpu_check.sh``'s first stage)."""

from __future__ import annotations

import importlib
import platform
import subprocess

import numpy as np
from onnx import TensorProto, helper


def main() -> None:
    try:
        print(subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm",
                              "--format=csv"], capture_output=True, text=True).stdout)
    except FileNotFoundError:
        print("nvidia-smi: not found")
    print("python", platform.python_version())
    for name in ("numpy", "onnx", "onnxruntime", "cupy", "torch", "flowserve"):
        try:
            module = importlib.import_module(name)
            print(name, getattr(module, "__version__", "?"), module.__file__)
        except Exception as exc:
            print(name, "not importable:", type(exc).__name__, exc)
    import onnxruntime as ort

    import flowserve as flow
    from flowserve.onnx_backend import providers, runtime

    print("providers", ort.get_available_providers(), "CUDA devices", runtime.cuda_device_count())
    print("cuda_usable", runtime.cuda_usable(), "flow.cuda.is_available", flow.cuda.is_available())
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    session = providers.create_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                                       ir_version=8), device="cuda")
    print("probe session", session.get_providers(), session.run(None, {"x": np.array([-1, 2], np.float32)}))
    x = flow.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device="cuda")
    print("eager on cuda", type(x._data), (x @ x.T).numpy().tolist())


if __name__ == "__main__":
    main()
