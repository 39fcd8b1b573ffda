"""Devices: ``"cpu"`` always, ``"cuda"`` where CuPy and a GPU are usable."""

from __future__ import annotations

import functools

import numpy as np

from flowserve import dtypes
from flowserve.errors import DeviceError


class device:
    """``flowserve.device("cuda:0")``: a device type and index."""

    __slots__ = ("type", "index")

    def __init__(self, spec="cpu", index: int | None = None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        if isinstance(spec, int) and not isinstance(spec, bool):  # flow.device(0) is cuda:0, as torch
            spec = f"cuda:{spec}"
        kind, _, idx = str(spec).partition(":")
        if kind not in ("cpu", "cuda") or (idx and not idx.isdigit()):
            raise DeviceError(f"expected device 'cpu' or 'cuda[:N]', got {spec!r}")
        self.type = kind
        self.index = int(idx) if idx else (index if index is not None else (0 if kind == "cuda" else None))

    def __eq__(self, other) -> bool:
        other = device(other) if isinstance(other, str) else other
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __repr__(self) -> str:
        return f"device(type='{self.type}', index={self.index})" if self.index is not None else f"device(type='{self.type}')"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    @property
    def xp(self):
        """The array module of this device (numpy or CuPy)."""
        return np if self.type == "cpu" else array_module(self)


CPU = device("cpu")


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@functools.lru_cache(maxsize=1)
def _cuda_status() -> tuple[bool, str, int]:
    """``(usable, why not, device count)``, probed once."""
    try:
        import cupy  # noqa: F401  # local: CuPy is optional, probed once
    except ImportError as exc:
        return False, f"CuPy is not installed ({_one_line(exc)}); pip install \"flowserve[cuda]\" (CuPy for CUDA 13) to use 'cuda'", 0
    except Exception as exc:  # a CUDA library that fails to load
        return False, f"CuPy failed to load ({type(exc).__name__}: {_one_line(exc)})", 0
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"CuPy found no usable CUDA driver ({_one_line(exc)})", 0
    if count == 0:
        return False, "no CUDA GPU is visible", 0
    return True, "", count


class cuda:
    """``flowserve.cuda.is_available()`` and ``device_count()``, as in OneFlow."""

    @staticmethod
    def is_available() -> bool:
        return _cuda_status()[0]

    @staticmethod
    def device_count() -> int:
        return _cuda_status()[2]

    @staticmethod
    def current_device() -> int:
        return 0


def as_device(spec) -> device:
    d = spec if isinstance(spec, device) else device(spec if spec is not None else "cpu")
    if d.type == "cuda":
        ok, why, count = _cuda_status()
        if not ok:
            raise DeviceError(f"cannot use device '{d}': {why}")
        if d.index >= count:
            raise DeviceError(f"cannot use device '{d}': {count} CUDA device(s) visible, "
                              f"expected an index below {count}")
    return d


def array_module(d: device):
    """numpy for the CPU, CuPy for a CUDA device: kernels are written against either."""
    if d.type == "cpu":
        return np
    import cupy  # local: CuPy is optional, loaded for a GPU only

    return cupy


def to_device_array(array, d: device):
    """``array`` on device ``d``: a numpy array on the CPU, a CuPy array on a GPU (copied
    only when it lives elsewhere)."""
    if d.type == "cpu":
        return array.get() if hasattr(array, "get") and not isinstance(array, np.ndarray) else array
    import cupy  # local: CuPy is optional, loaded for a GPU only

    if array.dtype == dtypes.bfloat16.np:
        raise DeviceError(f"cannot move a bfloat16 tensor to '{d}': CuPy has no bfloat16 arrays; "
                          "use float16 or float32 on the GPU")
    with cupy.cuda.Device(d.index or 0):
        if isinstance(array, cupy.ndarray) and array.device.id != (d.index or 0):
            return cupy.array(array, copy=True)  # another GPU: copy onto this one
        return cupy.asarray(array)
