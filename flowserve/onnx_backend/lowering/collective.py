"""ONNX lowerings of the collective primitives: an ONNX model is one process, and in a world
of one process a collective returns its input. (Deployable graphs are traced in eval mode
and hold none; a multi-process training step runs them between ONNX sessions.)"""

from __future__ import annotations

from flowserve.onnx_backend.lowering.registry import simple
from flowserve.ops import collective as prims

simple("Identity", prims.all_reduce, prims.reduce_scatter, prims.all_gather)
