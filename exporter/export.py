"""``flowserve.exporter.export``: an inference graph -> a checked, fused ONNX model.

>>> import flowserve as flow
>>> from flowserve.exporter import export
>>> result = export("mlp_dir", "mlp.onnx", target="onnxruntime")   # doctest: +SKIP
>>> print(result.report.summary())                                 # doctest: +SKIP
"""

from __future__ import annotations

import json

import time
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from flowserve.errors import ExportError
from flowserve.exporter.fused import TARGETS, fused_lowerings, load_emitters
from flowserve.exporter.parity import check_parity
from flowserve.exporter.passes import ExportGraph, run_passes
from flowserve.exporter.report import ExportReport
from flowserve.exporter.source import ExportSource, resolve_source
from flowserve.exporter.writing import check_model, session_for, write_model
from flowserve.format.onnx_metadata import BATCH_NOTE_KEY, DYNAMIC_DIMS_KEY
from flowserve.onnx_backend import versions
from flowserve.onnx_backend.lower import lower_ir

PARITY_BATCHES = (2, 5)


@dataclass
class ExportResult:
    """What ``export`` made: the ONNX model, a report of the passes and checks, the path."""

    model: onnx.ModelProto
    report: ExportReport
    path: Path | None = None
    extra: dict = field(default_factory=dict)


def export(source, path=None, *, target: str = "portable", opset: int | None = None, check: bool = True,
           dynamic_batch: bool = True, fuse: bool = True, inputs: dict | None = None,
           rtol: float | None = None) -> ExportResult:
    """Export ``source`` (a called ``nn.Graph``, a ``flow.load``-ed graph, or a saved
    directory) to ONNX; write it to ``path`` when given.

    ``target``: ``"portable"`` (fused groups as ``flowserve``-domain local functions, any
    runtime) or ``"onnxruntime"`` (ONNX Runtime's ``com.microsoft`` fused kernels).
    ``opset``: defaults to the newest the installed ONNX Runtime loads (>= 21).
    ``check``: ``onnx.checker`` full check, shape inference and the parity check against
    flowserve's own execution at batch sizes 2 and 5 (or on ``inputs`` when given), within
    ``rtol`` (default 1e-5 for float32, looser for float16/bfloat16) and ``rtol * max|ref|``.
    ``fuse=False`` exports the same graph without fusion (for comparison).

    >>> g = MyGraph(); g(flow.randn(2, 4))                        # doctest: +SKIP
    >>> export(g, "model.onnx").report.fused                       # doctest: +SKIP
    """
    started = time.perf_counter()
    if target not in TARGETS:
        raise ExportError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    opset = _opset(opset)
    src = resolve_source(source)
    load_emitters()
    unfused_nodes = len(_lower(src, ExportGraph.of(src.ir, src.arrays), opset, dynamic_batch, target).graph.node)
    # fused groups become float32 kernels or functions around ops ONNX Runtime runs in float32
    # only (Conv, Erf): a float64 graph is exported unfused, each op in float64
    graph = run_passes(ExportGraph.of(src.ir, src.arrays), fuse=fuse and not _computes_in_float64(src.ir))
    model = _lower(src, graph, opset, dynamic_batch, target)
    if (dynamic_batch and src.batched) or src.dynamic_dims:
        _name_signature(model, src)
    if src.dynamic_dims:  # the server checks that the inputs agree on each named dim
        model.metadata_props.add(key=DYNAMIC_DIMS_KEY, value=json.dumps(src.dynamic_dims, sort_keys=True))
    if src.batch_note:  # the server repeats it when a request has another batch size
        model.metadata_props.add(key=BATCH_NOTE_KEY, value=src.batch_note)
    report = ExportReport(source=src.where, target=target, opset=opset, ir_version=model.ir_version,
                          fused=graph.groups, folded=graph.folded, passes=graph.applied,
                          nodes_before=unfused_nodes,
                          nodes_after=len(model.graph.node), ops_after=_op_counts(model))
    path = Path(path) if path is not None else None
    if path is not None:
        report.external_data = write_model(model, path)
    if check:
        model = check_model(model, path)
        session = session_for(model, path)
        batches = list(PARITY_BATCHES) if dynamic_batch and src.batched else [None]
        specs = src.inputs if batches != [None] else _traced_specs(src)  # named dims: at the traced sizes
        report.parity = check_parity(session, src.ir, src.arrays, specs, batches, inputs, rtol)
    report.seconds = time.perf_counter() - started
    return ExportResult(model, report, path)


def _traced_specs(src: ExportSource) -> list:
    traced = {v.name: list(v.shape) for v in src.ir.inputs}
    return [s.model_copy(update={"shape": traced.get(s.name, s.shape)}) for s in src.inputs]


def _computes_in_float64(ir) -> bool:
    return any(v.dtype == "float64" for v in ir.values.values())


def _opset(opset: int | None) -> int:
    if opset is None:
        return max(versions.DEFAULT_OPSET, min(versions.max_runtime_opset(), versions.DEFAULT_OPSET))
    if opset not in versions.IR_VERSION_FOR_OPSET or opset < versions.MIN_OPSET:
        choices = [o for o in sorted(versions.IR_VERSION_FOR_OPSET) if o >= versions.MIN_OPSET]
        raise ExportError(f"opset must be one of {choices} (what ONNX Runtime loads), got {opset}")
    if opset < 20:
        raise ExportError(f"opset {opset} lacks Gelu (opset 20); the exporter needs opset >= 20")
    return opset


def _lower(src: ExportSource, graph: ExportGraph, opset: int, dynamic_batch: bool, target: str):
    try:
        return lower_ir(graph.ir, graph.consts, dynamic_batch=dynamic_batch and src.batched, opset=opset,
                        lowerings=fused_lowerings(target), dynamic_dims=src.dynamic_dims)
    except ExportError as exc:
        raise ExportError(f"{src.where}: {exc}") from None


def _name_signature(model: onnx.ModelProto, src: ExportSource) -> None:
    """Dims that the manifest marks dynamic (-1) get symbolic names (``batch`` for dim 0)."""
    specs = {s.name: s for s in list(src.inputs) + list(src.outputs)}
    for info in list(model.graph.input) + list(model.graph.output):
        spec = specs.get(info.name)
        if spec is None:
            continue
        named = src.dynamic_dims.get(info.name, {})
        for i, (d, dim) in enumerate(zip(spec.shape, info.type.tensor_type.shape.dim)):
            if i in named:
                dim.dim_param = named[i]
            elif d == -1:
                dim.dim_param = "batch" if i == 0 else f"{info.name}_dim{i}"
    model.doc_string = f"exported by flowserve from {src.where}"


def _op_counts(model: onnx.ModelProto) -> dict:
    counts: dict = {}
    for node in model.graph.node:
        key = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))
