"""``flow.backends.cudnn``: PyTorch's cuDNN switches, which set how ONNX Runtime's CUDA provider
runs compiled graphs (see ``flowserve.backends``). ``enabled`` is accepted and changes nothing:
the CUDA provider always uses cuDNN for convolutions."""

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
