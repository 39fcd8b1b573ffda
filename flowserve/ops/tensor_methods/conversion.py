"""``Tensor`` conversions: ``to(device, dtype)``, ``byte()``/``char()``/``short()``, ``clone``,
``copy_``, and the size and placement facts (``itemsize``, ``nbytes``, ``is_global``)."""

from __future__ import annotations

from flowserve import dtypes
from flowserve.device import as_device
from flowserve.ops import functional
from flowserve.tensor import Tensor


_TO_KEYWORDS = frozenset({"device", "dtype", "other", "copy", "non_blocking", "memory_format"})


class ConversionMethods:
    """Device and dtype moves, copies, and facts about storage."""

    __slots__ = ()

    clone = functional.clone
    is_complex, is_nonzero = functional.is_complex, functional.is_nonzero

    def to(self, *args, **kwargs):
        """``t.to("cuda")``, ``t.to(flow.float16)``, ``t.to(other)`` (``other``'s dtype and device),
        ``t.to(device, dtype)``; keywords ``device``, ``dtype``, ``other``, ``copy`` (a new tensor
        even when nothing changes), ``non_blocking`` and ``memory_format`` (no effect here)."""
        unknown = set(kwargs) - _TO_KEYWORDS
        if unknown:
            raise TypeError(f"Tensor.to() got unexpected keyword arguments {sorted(unknown)}; "
                            f"it takes {sorted(_TO_KEYWORDS)}")
        dev, dt = None, kwargs.get("dtype")
        for a in list(args) + [kwargs.get("other"), kwargs.get("device")]:
            if a is None or isinstance(a, bool):  # to(device, dtype, non_blocking, copy) positionally
                continue
            if isinstance(a, Tensor):
                dev, dt = a.device, a.dtype
            elif isinstance(a, dtypes.dtype) or a in (float, int, bool):
                dt = a
            else:
                dev = a
        out = self
        if dt is not None and dtypes.as_dtype(dt) is not self._dtype:
            out = functional.cast(out, dtypes.as_dtype(dt))
        if dev is not None and as_device(dev) != self._device:
            out = functional.to_device(out, as_device(dev))
        flags = [a for a in args if isinstance(a, bool)]  # positional non_blocking, copy
        copy = kwargs.get("copy", len(flags) > 1 and flags[1])
        return functional.clone(out) if copy and out is self else out

    def byte(self):
        return functional.cast(self, dtypes.uint8)

    def char(self):
        return functional.cast(self, dtypes.int8)

    def short(self):
        return functional.cast(self, dtypes.int16)

    def copy_(self, src):
        return self._assign(functional.expand(functional.cast(src, self.dtype), self.shape))

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * self.numel()

    @property
    def is_xpu(self) -> bool:
        return False  # OneFlow's other accelerators: flowserve runs on CPU and CUDA

    @property
    def is_global(self) -> bool:
        return False  # a local tensor (OneFlow's global tensors span ranks: flowserve.distributed)
