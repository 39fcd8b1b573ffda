"""Errors for the PyTorch and OneFlow names flowserve does not have: an ``AttributeError``
that names the API the user reached for and what to use instead.

Each public namespace (``flowserve``, ``flowserve.nn``, ``flowserve.nn.functional``,
``flowserve.optim``, ``flowserve.optim.lr_scheduler``, ``Tensor``) raises these from its
``__getattr__``; ``ADVICE`` holds what to do instead for the names ported code reaches for.
"""

from __future__ import annotations

import importlib
import importlib.util

ADVICE = {
    "flowserve": {
        "onnx": "torch.onnx.export: use flow.save(graph, dir) then `flowserve export dir`",
        "hub": "torch.hub: build the model from its code and load weights with flow.load('weights.pth')",
        "fft": "torch.fft is not in flowserve",
        "linalg": "torch.linalg is not in flowserve; matmul, einsum and norms are (flow.matmul, flow.einsum)",
        "sparse": "sparse tensors are not in flowserve; use dense tensors",
        "vmap": "torch.vmap is not in flowserve; batch the computation along dim 0",
        "func": "torch.func is not in flowserve; use flow.autograd.grad",
        "set_default_dtype": "flowserve's default float dtype is float32; pass dtype= where another is needed",
    },
    "flowserve.jit": {
        "script": "torch.jit.script: use nn.Graph (a traced static graph; flow.save(graph, dir) writes it)",
        "trace": "torch.jit.trace: use nn.Graph (a traced static graph; flow.save(graph, dir) writes it)",
        "save": "torch.jit.save: flow.save(graph, dir) saves a traced nn.Graph",
        "load": "torch.jit.load: flow.load(dir) loads a saved nn.Graph",
    },
    "flowserve.optim": {
        "SparseAdam": "use Adam (flowserve has no sparse gradients)",
        "ASGD": "ASGD is not in flowserve; use SGD",
        "Rprop": "Rprop is not in flowserve; use Adam or RMSprop",
    },
    "flowserve.optim.lr_scheduler": {
        "OneCycleLR": "compose LinearLR and CosineAnnealingLR with SequentialLR",
        "CyclicLR": "use LambdaLR with your cycle as the lambda",
        "ReduceLROnPlateau": "ReduceLROnPlateau is not in flowserve; lower group['lr'] yourself when the "
                             "metric stalls",
    },
    "Tensor": {
        "storage": "flowserve tensors expose their data through .numpy()",
        "data_ptr": "flowserve tensors expose their data through .numpy()",
        "pin_memory": "not needed: flowserve copies host arrays to ONNX Runtime directly; drop the call",
    },
}

_PYTORCH = {"flowserve": "torch", "flowserve.amp": "torch.amp", "Tensor": "torch.Tensor"}


def missing(namespace: str, name: str) -> AttributeError:
    """The error for ``namespace.name``: what it is in PyTorch/OneFlow, and what to do instead."""
    torch_name = _PYTORCH.get(namespace, namespace.replace("flowserve", "torch", 1))
    oneflow_name = torch_name.replace("torch", "oneflow", 1)
    advice = ADVICE.get(namespace, {}).get(name)
    where = "'Tensor' object" if namespace == "Tensor" else f"module '{namespace}'"
    instead = advice or ("it is not in flowserve; docs/nn.md, docs/tensor.md and docs/training.md list what is")
    return AttributeError(f"{where} has no attribute '{name}' ({torch_name}.{name} / {oneflow_name}.{name}): "
                          f"{instead}")


def module_getattr(namespace: str):
    """A module ``__getattr__``: a submodule not imported yet is imported (``flow.models``,
    ``flow.exporter``), any other name raises ``missing`` (dunders get the plain error)."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(f"module '{namespace}' has no attribute '{name}'")
        if not name.startswith("_") and _is_submodule(namespace, name):
            return importlib.import_module(f"{namespace}.{name}")
        raise missing(namespace, name)

    return __getattr__


def _is_submodule(namespace: str, name: str) -> bool:
    try:
        return importlib.util.find_spec(f"{namespace}.{name}") is not None
    except ModuleNotFoundError:  # ``namespace`` is a module, not a package
        return False
