"""A compiled signature of an ``nn.Graph``: its ONNX Runtime session and state plumbing.

Training graphs take parameters and optimizer state as inputs and return their new
values, which are written back into the eager tensors after each call, so the eager
module always holds the graph's values. Inference graphs carry parameters as
initializers (ONNX Runtime folds and re-lays them out) and are rebuilt when a parameter
changes in eager mode.
"""

from __future__ import annotations

import numpy as np

from flowserve.device import CPU, to_device_array
from flowserve.errors import GraphError
from flowserve.nn.graph.trace import Traced
from flowserve.tensor import Tensor


def _versions(state: dict) -> tuple:
    return tuple(t._version for t in state.values())


class CompiledGraph:
    def __init__(self, traced: Traced, training: bool, options: dict | None = None,
                 dynamic_batch: bool = False):
        self.traced = traced
        self.training = training
        self.options = options or {}
        self.dynamic_batch = dynamic_batch
        self.output_names = [v.name for v in traced.ir.outputs]
        self.update_names = list(traced.ir.updates)
        self._build_session()

    def _build_session(self) -> None:
        from flowserve.exporter.lower import lower_ir
        from flowserve.exporter.runtime import create_session

        ir, state = self.traced.ir, self.traced.state
        if self.training:
            fed = [k for k in ir.state if ir.state_kinds[k] != "constant"]
            baked = dict(self.traced.constants)
        else:
            fed = list(self.traced.system_feeds)
            baked = {**self.traced.constants, **{k: t.numpy() for k, t in state.items()}}
        self.fed_state = fed
        self.model = lower_ir(ir, baked, state_inputs=fed, state_outputs=self.update_names,
                              dynamic_batch=self.dynamic_batch)
        self.session = create_session(self.model, graph_mode=True, options=self.options)
        self.versions = _versions(state)

    def run(self, inputs: list) -> list[Tensor]:
        ir, state = self.traced.ir, self.traced.state
        if not self.training and _versions(state) != self.versions:
            self._build_session()  # a parameter changed in eager mode since compilation
        feeds = {v.name: _host(t) for v, t in zip(ir.inputs, inputs)}
        for name in self.fed_state:
            feed = self.traced.system_feeds.get(name)
            feeds[name] = feed() if feed is not None else _host(state[name])
        results = self.session.run(None, feeds)
        n = len(self.output_names)
        for name, array in zip(self.update_names, results[n:]):
            target = state[name]
            target._data = to_device_array(array, target.device)
            target._version += 1
        device = inputs[0].device if inputs else CPU
        return [Tensor._wrap(to_device_array(r, device), device) for r in results[:n]]


def _host(t: Tensor) -> np.ndarray:
    if t._lazy is not None:
        raise GraphError("a lazy tensor was passed to a compiled graph")
    return t.numpy()
