"""Proof of a model on its reference examples: what export checks and the server verifies.

A model is run on every stored example batch and, where the batch axis is dynamic, on the
same rows at a second batch size (one row at a time, or all rows at once when the
examples are single rows). Each output is compared with the reference outputs that
``flow.save`` stored: largest absolute error, largest error relative to the output's
scale, top-1 agreement for classifier outputs (``(batch, classes)`` floats), and a
verdict against the ``Criteria``::

    proof = prove(session_runner, examples, Criteria(rtol=examples.rtol), batched=True)
    print(proof.table())
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import numpy as np
from flowserve.format.examples import ExampleSet
from flowserve.format.verification import Criteria


@dataclass
class OutputProof:
    """One output at one batch size, over every example row."""

    batch: int
    output: str
    rows: int
    max_abs_err: float
    max_rel_err: float  # largest absolute error / max|reference|
    top1_agreement: Optional[float]  # classifier outputs (and exact agreement of integer outputs)
    passed: bool
    reason: str = ""


@dataclass
class Proof:
    """The records of one model on its examples, and the criteria they were held to."""

    precision: str
    criteria: Criteria
    records: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.records) and all(r.passed for r in self.records)

    def agreement(self) -> Optional[float]:
        """The lowest top-1 agreement over classifier outputs (None without any)."""
        values = [r.top1_agreement for r in self.records if r.top1_agreement is not None]
        return min(values) if values else None

    def max_abs_err(self) -> dict:
        """Output -> the largest absolute error at any batch size."""
        worst: dict = {}
        for r in self.records:
            worst[r.output] = max(worst.get(r.output, 0.0), r.max_abs_err)
        return worst

    def failures(self) -> list:
        return [r for r in self.records if not r.passed]

    def to_json(self) -> dict:
        return {"precision": self.precision, "passed": self.passed, "criteria": self.criteria.model_dump(),
                "top1_agreement": self.agreement(), "max_abs_err": self.max_abs_err(),
                "records": [asdict(r) for r in self.records]}

    def parameters(self) -> dict:
        """The numbers a server shows in model metadata (``parameters.verification``)."""
        rows = max((r.rows for r in self.records), default=0)
        return {"precision": self.precision, "examples": rows, "top1_agreement": self.agreement(),
                "max_abs_err": self.max_abs_err(), "criteria": self.criteria.describe()}

    def table(self) -> str:
        """A short table: one line per batch size and output."""
        head = f"  {'batch':>5}  {'output':<16} {'rows':>5} {'max abs err':>11} {'max rel err':>11} " \
               f"{'top-1 agree':>11}  result"
        lines = [f"proof on the stored examples ({self.precision}; {self.criteria.describe()}):", head]
        for r in self.records:
            agree = "-" if r.top1_agreement is None else f"{r.top1_agreement:.2%}"
            verdict = "pass" if r.passed else f"FAIL ({r.reason})"
            lines.append(f"  {r.batch:>5}  {r.output:<16} {r.rows:>5} {r.max_abs_err:>11.3g} "
                         f"{r.max_rel_err:>11.3g} {agree:>11}  {verdict}")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: the verdict and the figures, or the first failure."""
        agree = self.agreement()
        figures = f"top-1 agreement {agree:.2%}, " if agree is not None else ""
        worst = max(self.records, key=lambda r: r.max_rel_err, default=None)
        figures += f"max rel err {worst.max_rel_err:.3g} on {worst.output!r}" if worst else "no records"
        if self.passed:
            return f"{self.precision} matches its examples ({figures}; {self.criteria.describe()})"
        first = self.failures()[0] if self.failures() else None
        where = f"output {first.output!r} at batch {first.batch}: {first.reason}" if first else "no examples ran"
        return f"{self.precision} does NOT match its examples: {where} ({figures}; {self.criteria.describe()})"


def prove(run: Callable[[dict], dict], examples: ExampleSet, criteria: Criteria, *, batched: bool,
          precision: str = "fp32", max_batch: int = 0) -> Proof:
    """Run ``run`` (input name -> array, to output name -> array) on every example batch
    and, when ``batched``, on the same rows at a second batch size; compare with the
    reference outputs. ``max_batch`` (> 0) splits batches the model cannot take at once."""
    proof = Proof(precision, criteria)
    for size, batches in _batch_plans(examples, batched, max_batch):
        got = {name: [] for name in examples.output_names}
        for inputs in batches:
            outputs = run(inputs)
            for name in got:
                got[name].append(np.asarray(outputs[name]))
        for name in examples.output_names:
            ref = _join([b.outputs[name] for b in examples.batches])
            proof.records.append(compare(name, ref, _join(got[name]), size, criteria))
    return proof


def _join(arrays: list) -> np.ndarray:
    """Batch-first outputs of several runs, one after the other (scalars stacked)."""
    if all(a.ndim for a in arrays):
        try:
            return np.concatenate(arrays)
        except ValueError:  # a run gave another shape: compare() reports the mismatch
            return np.concatenate([a.reshape(-1) for a in arrays])
    return np.stack([np.asarray(a) for a in arrays])


def _batch_plans(examples: ExampleSet, batched: bool, max_batch: int) -> list:
    """(label, list of input dicts) per batch size: the stored batches, then the rows
    re-batched one at a time (or all together when the stored batches are single rows)."""
    stored = [b.inputs for b in examples.batches]
    if not batched:
        return [(examples.batches[0].rows, stored)]
    everything = {n: np.concatenate([b[n] for b in stored]) for n in examples.input_names}
    rows = examples.rows
    largest = max(b.rows for b in examples.batches)
    second = rows if largest == 1 else 1
    plans = []
    for size, source in ((largest, stored), (second, [everything])):
        limit = min(size, max_batch) if max_batch else size
        plans.append((limit, [_slice(inputs, i, limit) for inputs in source
                              for i in range(0, _rows(inputs), limit)]))
    return plans


def _rows(inputs: dict) -> int:
    return int(next(iter(inputs.values())).shape[0])


def _slice(inputs: dict, start: int, size: int) -> dict:
    return {n: np.ascontiguousarray(a[start:start + size]) for n, a in inputs.items()}


def compare(name: str, ref: np.ndarray, got: np.ndarray, batch: int, criteria: Criteria) -> OutputProof:
    """Compare one output with its reference under ``criteria``."""
    rows = int(ref.shape[0]) if ref.ndim else 1
    if ref.shape != got.shape:
        return OutputProof(batch, name, rows, float("inf"), float("inf"), None, False,
                           f"shape {got.shape}, the reference is {ref.shape}")
    if ref.dtype.kind not in "fc":
        equal = float(np.mean(ref == got)) if ref.size else 1.0
        wrong = 1.0 - equal
        threshold = criteria.min_agreement if criteria.rtol is None and criteria.min_agreement is not None else 1.0
        ok = equal >= threshold
        return OutputProof(batch, name, rows, wrong, wrong, equal, ok, "" if ok else f"{equal:.2%} equal")
    r64, g64 = ref.astype(np.float64), got.astype(np.float64)
    err = np.abs(g64 - r64)
    scale = float(np.max(np.abs(r64))) if r64.size else 0.0
    finite = bool(np.all(np.isfinite(g64) == np.isfinite(r64)))
    max_abs = float(np.max(np.where(np.isfinite(err), err, np.inf))) if err.size else 0.0
    rel = max_abs / scale if scale else max_abs
    agreement = _top1(r64, g64)
    reasons = [] if finite else ["non-finite values where the reference is finite"]
    if criteria.rtol is not None:
        bad = int(np.sum(err > criteria.rtol * (scale + np.abs(r64))))
        if bad:
            reasons.append(f"{bad} of {ref.size} elements beyond rtol {criteria.rtol:g}")
    if criteria.min_agreement is not None and agreement is not None and agreement < criteria.min_agreement:
        reasons.append(f"top-1 agreement {agreement:.2%} < {criteria.min_agreement:.2%}")
    bound = criteria.max_abs_err.get(name)
    if bound is not None and max_abs > bound:
        reasons.append(f"max abs err {max_abs:.3g} > {bound:.3g}")
    return OutputProof(batch, name, rows, max_abs, rel, agreement, not reasons, "; ".join(reasons))


def _top1(ref: np.ndarray, got: np.ndarray) -> Optional[float]:
    """Top-1 agreement of a classifier output (``(rows, classes)``, classes >= 2)."""
    if ref.ndim != 2 or ref.shape[1] < 2 or ref.shape[0] == 0:
        return None
    return float(np.mean(np.argmax(ref, axis=1) == np.argmax(got, axis=1)))
