"""Exports that prove themselves: ``flowserve export DIR --precision P``.

The float32 export (checked against flowserve's interpreter as every export is) is run
on the saved directory's reference examples; a reduced-precision variant is made from it
with ONNX Runtime's tools (``exporter/precision.py``) and measured against the float32
reference outputs. A variant whose top-1 agreement falls below ``min_agreement`` is not
written unless ``force``. What was measured goes to ``DIR/reports/export.json``; beside
the written model, ``<model>.examples/`` carries the examples and the criteria the server
holds the model to before it reports ready::

    result = export_verified("resnet_dir", "resnet.int8.onnx", precision="int8")
    print(result.summary())
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import onnx

from flowserve.errors import ExportError
from flowserve.exporter.export import ExportResult, export
from flowserve.exporter.precision import DESCRIPTIONS, base_target, check_precision, prepare, reduce_precision
from flowserve.exporter.proof import Proof, prove
from flowserve.exporter.qat import is_quantized, output_steps
from flowserve.exporter.writing import write_model
from flowserve.format.examples import ExampleSet, read_examples
from flowserve.format.tensors import write_bytes
from flowserve.format.verification import VERIFY_FILE, Criteria, VerifySpec, sidecar_path
from flowserve.onnx_backend.providers import create_session

REPORTS_DIR = "reports"
EXPORT_REPORT = "export.json"
DEFAULT_MIN_AGREEMENT = 0.99
ERROR_MARGIN = 2.0  # a served reduced-precision model may differ from export's figures by this factor


@dataclass
class VerifiedExport:
    """What ``export_verified`` made and measured."""

    export: ExportResult
    precision: str
    model: onnx.ModelProto
    reference: Optional[Proof]  # the float32 export on the examples
    proof: Optional[Proof]  # the written model on the examples (the reference for fp32)
    path: Optional[Path] = None
    forced: bool = False

    def summary(self) -> str:
        lines = [self.export.report.summary(), f"  precision {self.precision}: {DESCRIPTIONS[self.precision]}"]
        if self.proof is None:
            lines.append("  no reference examples in the source: nothing proven beyond the parity check "
                         "(save with flow.save(graph, dir, examples=...))")
        else:
            if self.reference is not None and self.reference is not self.proof:
                lines.append(self.reference.table())
            lines.append(self.proof.table())
            lines.append(("FORCED: " if self.forced else "") + self.proof.summary())
        return "\n".join(lines)


def export_verified(source, path=None, *, precision: str = "fp32", target: str = "portable",
                    min_agreement: float = DEFAULT_MIN_AGREEMENT, force: bool = False,
                    opset: Optional[int] = None, rtol: Optional[float] = None,
                    calibration: Optional[ExampleSet] = None) -> VerifiedExport:
    """Export ``source`` at ``precision``, prove it on the stored examples, write it to
    ``path`` with its examples beside it, and record the figures in the saved directory's
    ``reports/export.json``. ``calibration`` replaces the examples for int8 calibration."""
    check_precision(precision)
    if not 0 <= min_agreement <= 1:
        raise ExportError(f"min_agreement must be in [0, 1], got {min_agreement}")
    examples = read_examples(source) if isinstance(source, (str, Path)) else None
    # a reduced-precision variant starts from a float32 export (precision.base_target);
    # proving that float32 model on the examples is its parity check (same oracle, real
    # inputs), so the random-input one is run only when there are no examples
    reduced = precision != "fp32"
    result = export(source, None, target=base_target(precision, target), opset=opset, rtol=rtol,
                    check=not (reduced and examples is not None))
    batched = _batched(result.model)
    reference = _prove(result.model, examples, reference_criteria(result.model, examples, min_agreement), batched,
                       "fp32") if examples else None
    outcome = VerifiedExport(result, precision, result.model, reference, reference, Path(path) if path else None)
    try:
        if reference is not None and not reference.passed:
            if not force:
                raise ExportError(f"{result.report.source}: the float32 export does not reproduce the saved "
                                  f"examples: {reference.summary()}; nothing written (--force writes it anyway)")
            outcome.forced = True
        if precision != "fp32":
            _reduce(outcome, examples, calibration, min_agreement, force, batched)
    except ExportError as exc:
        _record(source, outcome, written=False, note=str(exc))
        raise
    if outcome.path is not None:
        _write(outcome, examples, min_agreement, source)
    _record(source, outcome, written=outcome.path is not None)
    return outcome


def _reduce(outcome: VerifiedExport, examples, calibration, min_agreement: float, force: bool,
            batched: bool) -> None:
    precision = outcome.precision
    if examples is None and not force:
        raise ExportError(f"precision {precision} is checked on the saved directory's examples and "
                          f"{outcome.export.report.source} has none: save the graph with "
                          "flow.save(graph, dir, examples=...), or pass --force to write it unchecked")
    model = reduce_precision(prepare(outcome.model, precision), precision, calibration or examples)
    model.metadata_props.add(key="flowserve.precision", value=precision)
    outcome.model = model
    if examples is None:
        outcome.forced = True
        return
    outcome.proof = _prove(model, examples, Criteria(min_agreement=min_agreement), batched, precision)
    if not outcome.proof.passed:
        if not force:
            raise ExportError(f"{precision} export refused: {outcome.proof.summary()}; nothing written. "
                              f"Pass --force to write it anyway, or lower --min-agreement")
        outcome.forced = True


def reference_criteria(model: onnx.ModelProto, examples: ExampleSet, min_agreement: float) -> Criteria:
    """The float32 export reproduces the examples within their tolerance; a QAT graph's
    export (already QDQ, ``exporter/qat.py``) within one quantization step of each output,
    or with ``min_agreement`` where an output is not quantized."""
    if not is_quantized(model):
        return Criteria(rtol=examples.rtol)
    steps = output_steps(model)
    if steps is None:
        return Criteria(min_agreement=min_agreement)
    scale = {n: max(float(np.abs(b.outputs[n]).max()) for b in examples.batches) for n in examples.output_names}
    return Criteria(max_abs_err={n: steps[n] + examples.rtol * scale[n] for n in examples.output_names})


def _prove(model: onnx.ModelProto, examples: ExampleSet, criteria: Criteria, batched: bool,
           precision: str) -> Proof:
    session = create_session(model, device="cpu")
    names = [o.name for o in session.get_outputs()]

    def run(inputs: dict) -> dict:
        return dict(zip(names, session.run(names, inputs)))

    return prove(run, examples, criteria, batched=batched, precision=precision)


def _batched(model: onnx.ModelProto) -> bool:
    """Dim 0 of every input is symbolic, and is the batch: not a dim named in
    ``flowserve.dynamic_dims`` (such dims are not merged across examples)."""
    dims = [i.type.tensor_type.shape.dim for i in model.graph.input]
    text = {p.key: p.value for p in model.metadata_props}.get("flowserve.dynamic_dims")
    names = {n for axes in json.loads(text).values() for n in axes.values()} if text else set()
    return bool(dims) and all(d and d[0].dim_param and d[0].dim_param not in names for d in dims)


def serving_criteria(outcome: VerifiedExport, examples: ExampleSet, min_agreement: float) -> Criteria:
    """What the server holds the written model to: the examples' tolerance at full
    precision; at reduced precision (or for a forced export), the agreement threshold (or
    what a forced export reached) and ``ERROR_MARGIN`` times the errors export measured,
    plus the tolerance."""
    if outcome.precision == "fp32" and not outcome.forced:
        return Criteria(rtol=examples.rtol)
    scale = {n: float(np.max(np.abs(np.concatenate([b.outputs[n].reshape(-1) for b in examples.batches]))))
             for n in examples.output_names}
    measured = outcome.proof.max_abs_err()
    bounds = {n: ERROR_MARGIN * measured[n] + examples.rtol * scale[n] for n in measured}
    agreement = outcome.proof.agreement()
    threshold = min(min_agreement, agreement) if agreement is not None else None
    return Criteria(min_agreement=threshold, max_abs_err=bounds)


def _write(outcome: VerifiedExport, examples: Optional[ExampleSet], min_agreement: float, source) -> None:
    outcome.export.report.external_data = write_model(outcome.model, outcome.path)
    folder = sidecar_path(outcome.path)
    if examples is None:
        shutil.rmtree(folder, ignore_errors=True)  # examples of an earlier export would not fit this model
        return
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        files = examples.write(tmp)
        spec = VerifySpec(model=outcome.path.name, precision=outcome.precision, source=str(source),
                          criteria=serving_criteria(outcome, examples, min_agreement), files=files,
                          forced=outcome.forced)
        write_bytes(tmp / VERIFY_FILE, spec.model_dump_json(indent=1).encode())
        _replace_dir(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace_dir(tmp: Path, target: Path) -> None:
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.rename(target, old)
    os.rename(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _record(source, outcome: VerifiedExport, written: bool, note: str = "") -> None:
    """Add this export to ``DIR/reports/export.json``, atomically: one entry per precision
    (the latest export at it), whose ``targets`` keep the latest export of every target the
    precision was exported for, so that proving one target does not drop another's proof."""
    if not isinstance(source, (str, Path)):
        return
    folder = Path(source) / REPORTS_DIR
    folder.mkdir(exist_ok=True)
    path = folder / EXPORT_REPORT
    try:
        doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        doc = {}
    exports = doc.get("exports") if isinstance(doc.get("exports"), dict) else {}
    target = outcome.export.report.target
    entry = {
        "written": written, "path": str(outcome.path) if outcome.path else None, "forced": outcome.forced,
        "note": note, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "description": DESCRIPTIONS[outcome.precision], "target": target, "export": outcome.export.report.to_json(),
        "reference": outcome.reference.to_json() if outcome.reference else None,
        "proof": outcome.proof.to_json() if outcome.proof else None,
    }
    previous = exports.get(outcome.precision)
    targets = previous.get("targets") if isinstance(previous, dict) else None
    targets = dict(targets) if isinstance(targets, dict) else {}
    targets[target] = entry
    exports[outcome.precision] = {**entry, "targets": targets}
    tmp = path.with_name(f".{EXPORT_REPORT}.{os.getpid()}")
    write_bytes(tmp, json.dumps({"format_version": 1, "exports": exports}, indent=1).encode())
    os.replace(tmp, path)
