"""``flow.backends.cudnn``: PyTorch's cuDNN switches (accepted; see ``flowserve.backends``)."""

from flowserve.device import cuda as _cuda

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    return _cuda.is_available()


def version():
    """None: flowserve does not link cuDNN itself (ONNX Runtime's CUDA provider does)."""
    return None
