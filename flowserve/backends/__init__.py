"""``flow.backends``: the backend queries and switches PyTorch scripts touch
(``import flowserve.backends.cudnn as cudnn`` works as ``torch.backends.cudnn`` does).

``mps.is_available()`` is False (flowserve has no Metal backend) and
``cudnn.is_available()`` says whether a CUDA device is usable, so scripts that pick their
device with these run unchanged.

The switches set how ONNX Runtime runs compiled graphs (``engine_flags``, read by
``flowserve.onnx_backend.runtime`` whenever it creates a session, so set them before a graph's
first call):

- ``cudnn.deterministic = True`` or ``flow.use_deterministic_algorithms(True)``: the
  session option ``use_deterministic_compute`` (on CPU too: ONNX Runtime then avoids its
  non-deterministic reductions; on CUDA, also deterministic cuDNN convolution algorithms);
- ``cudnn.benchmark``: the CUDA provider's ``cudnn_conv_algo_search``, ``EXHAUSTIVE`` when
  True (time every algorithm once per shape, as PyTorch's benchmark mode), ``HEURISTIC``
  when False (PyTorch's default: cuDNN's heuristic pick);
- ``cuda.matmul.allow_tf32`` and ``cudnn.allow_tf32``: the CUDA provider's ``use_tf32``.
  ONNX Runtime has one switch for matmuls and convolutions, so TF32 is on only when both
  allow it (PyTorch's defaults, ``False`` and ``True``, give full float32).

Eager mode computes with numpy on the CPU: it is deterministic and never uses TF32, so these
switches change nothing there. The cuDNN and TF32 switches mean nothing for CPU sessions.

>>> import flowserve as flow
>>> flow.backends.cudnn.benchmark = True
>>> flow.backends.engine_flags()["cudnn_conv_algo_search"]
'EXHAUSTIVE'
>>> flow.backends.cudnn.benchmark = False
>>> flow.backends.mps.is_available()
False
"""

from flowserve.backends import cuda, cudnn, mps  # noqa: F401

_DETERMINISTIC = {"mode": False, "warn_only": False}


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """``torch.use_deterministic_algorithms``: compiled graphs run with ONNX Runtime's
    deterministic compute (see the module doc). flowserve has no op without a deterministic
    form, so ``warn_only`` never has anything to warn about."""
    if not isinstance(mode, bool):
        raise TypeError(f"use_deterministic_algorithms expects mode True or False, got {mode!r}")
    _DETERMINISTIC.update(mode=mode, warn_only=bool(warn_only))


def are_deterministic_algorithms_enabled() -> bool:
    return _DETERMINISTIC["mode"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _DETERMINISTIC["mode"] and _DETERMINISTIC["warn_only"]


def engine_flags() -> dict:
    """What the switches ask of ONNX Runtime now: ``deterministic`` (session option
    ``use_deterministic_compute``), ``cudnn_conv_algo_search`` and ``use_tf32`` (CUDA
    provider options)."""
    return {
        "deterministic": bool(cudnn.deterministic) or _DETERMINISTIC["mode"],
        "cudnn_conv_algo_search": "EXHAUSTIVE" if cudnn.benchmark else "HEURISTIC",
        "use_tf32": bool(cuda.matmul.allow_tf32) and bool(cudnn.allow_tf32),
    }
