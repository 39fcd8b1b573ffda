"""``flow.backends.cuda``: PyTorch's CUDA matmul switches (``matmul.allow_tf32`` sets the CUDA
provider's ``use_tf32`` with ``cudnn.allow_tf32``; see ``flowserve.backends``)."""

from types import SimpleNamespace

matmul = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True)


def is_built() -> bool:
    """Whether this flowserve can use CUDA devices (through ONNX Runtime and CuPy): always."""
    return True
