"""Run the exporter passes on a small traced module and check the fused export."""

from __future__ import annotations

import numpy as np

import flowserve as flow
from flowserve.exporter import export
from flowserve.exporter.passes import ExportGraph, run_passes
from flowserve.exporter.source import resolve_source
from tests.exporter.helpers import InferenceGraph


def traced(model, *shape, ints: int = 0):
    model.eval()
    graph = InferenceGraph(model)
    x = flow.tensor(np.random.default_rng(0).integers(0, ints, shape)) if ints else flow.randn(*shape)
    graph(x)
    return graph


def passes_of(graph) -> ExportGraph:
    src = resolve_source(graph)
    return run_passes(ExportGraph.of(src.ir, src.arrays))


def kinds(graph) -> list:
    return [g.kind for g in passes_of(graph).groups]


def exported_ops(graph, target: str) -> dict:
    """Op counts of the checked export (the parity check runs inside ``export``)."""
    return export(graph, target=target).report.ops_after
