"""The two buffers a training graph writes one state tensor's new values into, in turn.

A call reads the buffer the eager tensor holds and ONNX Runtime writes the new value
straight into the other one, which the tensor then holds: no state is copied per call.
The graph writes only into memory it allocated itself, and only while nothing outside it
can see that memory, so that every tensor and array keeps the values eager mode gives it
(eager updates rebind a tensor to a new array; they never write into one another reads):

- both buffers are the graph's own. The array a tensor starts from is read, never
  written: it may be the user's (``flow.from_numpy(a)``, ``p.data = ...``, ``copy_``,
  a loaded checkpoint), which the graph would otherwise change at its second call;
- a buffer something outside the graph still refers to (an array taken with
  ``.numpy()``, a view such as ``p[0]`` or ``p.reshape(-1)``, a value saved by the
  autograd tape) is left to its holders and a new one takes its place. numpy's views
  refer to the array they view, so its reference count tells; a training loop that
  keeps nothing between calls reuses the same two buffers at every call.
"""

from __future__ import annotations

import sys

import numpy as np

from flowserve.onnx_backend import runtime


class StatePair:
    """A state tensor's two buffers on one device (``xp``: numpy or CuPy), each with its
    ``OrtValue`` where they are host memory (host runs bind those)."""

    __slots__ = ("arrays", "values", "_xp", "_unheld")

    def __init__(self, like, xp):
        self._xp = xp
        self.arrays = [xp.empty(like.shape, like.dtype), xp.empty(like.shape, like.dtype)]
        self.values = [runtime.ort_value(a) for a in self.arrays] if xp is np else None
        self._unheld = sys.getrefcount(self.arrays[0])  # the count while only this pair holds it

    def holds(self, array) -> bool:
        return array is self.arrays[0] or array is self.arrays[1]

    def target(self, current) -> int:
        """The index of the buffer to write the new value into: the one ``current`` (what
        the tensor holds) is not, renewed first where something else refers to it."""
        i = 1 if current is self.arrays[0] else 0
        if sys.getrefcount(self.arrays[i]) > self._unheld:
            self.arrays[i] = self._xp.empty(current.shape, current.dtype)
            if self.values is not None:
                self.values[i] = runtime.ort_value(self.arrays[i])
        return i
