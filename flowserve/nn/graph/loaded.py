"""A graph loaded from a saved directory: runnable without the model's Python code."""

from __future__ import annotations

import numpy as np

from flowserve.errors import ShapeError
from flowserve.nn.graph.compiled import CompiledGraph
from flowserve.nn.graph.named_dims import check_shared_sizes
from flowserve.nn.graph.trace import Traced
from flowserve.ops.creation import from_numpy
from flowserve.tensor import Tensor


class LoadedGraph:
    """``flow.load(dir)`` of a saved graph: call it on tensors or numpy arrays.

    >>> g = flow.load("mlp_dir")          # doctest: +SKIP
    >>> g(flow.randn(2, 4)).shape          # doctest: +SKIP
    flowserve.Size([2, 3])
    """

    def __init__(self, manifest, ir, params: dict):
        self.manifest = manifest
        self.ir = ir
        self.params = params
        state = {k: from_numpy(params[k]) for k, kind in ir.state_kinds.items() if kind != "constant"}
        constants = {k: params[k] for k, kind in ir.state_kinds.items() if kind == "constant"}
        self._compiled = None
        self._traced = Traced(ir, constants, state)
        self._compiled_cls = CompiledGraph

    @property
    def name(self) -> str:
        return self.manifest.graph_name

    @property
    def inputs(self):
        return self.manifest.inputs

    @property
    def outputs(self):
        return self.manifest.outputs

    def __call__(self, *args):
        tensors = [a if isinstance(a, Tensor) else from_numpy(_array(a)) for a in args]
        if len(tensors) != len(self.ir.inputs):
            raise TypeError(f"{self.name} expects {len(self.ir.inputs)} inputs "
                            f"({', '.join(v.name for v in self.ir.inputs)}), got {len(tensors)}")
        self._check_shapes(tensors)
        if self._compiled is None:
            named = self.manifest.dynamic_dims
            dynamic = any(s.shape and s.shape[0] == -1 and 0 not in named.get(s.name, {}) for s in self.inputs)
            self._compiled = self._compiled_cls(self._traced, training=False, dynamic_batch=dynamic,
                                                dynamic_dims=named)
        outs = self._compiled.run(tensors)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _check_shapes(self, tensors) -> None:
        for spec, t in zip(self.inputs, tensors):
            shape = tuple(t.shape)
            if len(shape) != len(spec.shape) or any(d not in (-1, g) for d, g in zip(spec.shape, shape)):
                note = f" ({self.manifest.batch_note})" if self.manifest.batch_note else ""
                raise ShapeError(f"{self.name}: input {spec.name!r} expected size {tuple(spec.shape)} "
                                 f"(-1: any){note}, got {shape}")
        check_shared_sizes(self.name, self.manifest.dynamic_dims,
                           {spec.name: tuple(t.shape) for spec, t in zip(self.inputs, tensors)})

    def __repr__(self) -> str:
        lines = [f"(GRAPH:{self.name}:{self.manifest.graph_class}) loaded ("]
        lines += [f"  (INPUT:{s.name}:tensor(..., size={tuple(s.shape)}, dtype=flowserve.{s.dtype}))"
                  for s in self.inputs]
        lines += [f"  (OUTPUT:{s.name}:tensor(..., size={tuple(s.shape)}, dtype=flowserve.{s.dtype}))"
                  for s in self.outputs]
        return "\n".join(lines + [")"])


def _array(a):
    return np.ascontiguousarray(a)
