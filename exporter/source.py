"""What can be exported: a called ``nn.Graph``, a ``flow.load``-ed graph, a saved directory."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from flowserve.errors import ExportError
from flowserve.ir.graph import GraphIR
from flowserve.serialization.graph_read import graph_signature, read_graph_dir


@dataclass
class ExportSource:
    """The inference IR, its state arrays, its signature (``TensorSpec``s) and a name for
    messages (the directory, or the graph's name)."""

    ir: GraphIR
    arrays: dict
    inputs: list
    outputs: list
    where: str
    name: str
    batch_note: str | None = None  # why the batch is fixed, naming the op and line (manifest)
    dynamic_dims: dict = field(default_factory=dict)  # tensor name -> {axis: dim name} (manifest)

    @property
    def batched(self) -> bool:
        """Whether the signature has a dynamic batch axis (dim 0 of the inputs, not a named dim)."""
        return bool(self.inputs) and all(s.shape and s.shape[0] == -1 and 0 not in self.dynamic_dims.get(s.name, {})
                                         for s in self.inputs)


def resolve_source(source) -> ExportSource:
    if isinstance(source, (str, Path)):  # a saved directory: read without nn (the server exports these)
        manifest, ir, params = read_graph_dir(source)
        return ExportSource(ir, params, manifest.inputs, manifest.outputs, str(source), manifest.graph_name,
                            manifest.batch_note, manifest.dynamic_dims)
    from flowserve.nn.graph.graph import Graph  # local: the server exports saved directories and loads no nn
    from flowserve.nn.graph.loaded import LoadedGraph  # local: as above

    if isinstance(source, Graph):
        return _from_graph(source)
    if isinstance(source, LoadedGraph):
        m = source.manifest
        return ExportSource(source.ir, dict(source.params), m.inputs, m.outputs, m.graph_name, m.graph_name,
                            m.batch_note, m.dynamic_dims)
    raise ExportError(f"export expected an nn.Graph, a loaded graph or a saved directory path, "
                      f"got {type(source).__name__}")


def _from_graph(graph) -> ExportSource:
    deployed = graph.deployable_state()
    traced = deployed.traced
    arrays = {k: np.asarray(t.numpy()) for k, t in traced.state.items()}
    arrays.update({k: np.asarray(v) for k, v in traced.constants.items()})
    inputs, outputs = graph_signature(traced.ir, deployed.batch)
    return ExportSource(traced.ir, arrays, inputs, outputs, f"graph {graph.name}", graph.name, deployed.batch_note)
