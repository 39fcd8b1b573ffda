"""The numeric parity check every export ends with: the ONNX model in ONNX Runtime
against flowserve's own execution of the unfused IR (``flowserve.ir.interpreter``), on
random inputs at two batch sizes.

Outputs computed from a random draw (``randn``, ``rand``, dropout left in training mode)
cannot match element for element: ONNX Runtime and the interpreter draw different numbers.
Those outputs are checked for shape, dtype and finiteness only, and their records say so
(``compared == "shape"``); every other output is compared value by value."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flowserve import dtypes
from flowserve.errors import ExportError
from flowserve.format.verification import TOLERANCES
from flowserve.ir.graph import GraphIR
from flowserve.ir.interpreter import run_ir
from flowserve.ops.random import RANDOM_PRIMITIVES

DEFAULT_RTOL = 1e-5
# the check's memory is bounded, whatever a saved graph declares: sample inputs and every
# value the interpreter computes (the traced shape, scaled to the largest sample batch)
MAX_SAMPLE_ELEMENTS = 1 << 24
MAX_VALUE_ELEMENTS = 1 << 27


@dataclass
class ParityRecord:
    """One compared output: batch size, name, largest absolute error and what was allowed;
    ``compared`` is ``"values"``, or ``"shape"`` for an output drawn at random."""

    batch: int
    output: str
    max_abs_err: float
    allowed: float
    compared: str = "values"

    def to_json(self) -> dict:
        return {"batch": self.batch, "output": self.output, "max_abs_err": self.max_abs_err,
                "allowed": self.allowed, "compared": self.compared}


def sample_inputs(specs, batch: int | None, seed: int) -> dict:
    """Random inputs for a signature (``TensorSpec``s): -1 dims become ``batch``; floats are
    standard normal, integers in [0, 2) (valid class or token ids), bools random."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in specs:
        shape = tuple(batch if d == -1 else d for d in spec.shape)
        if math.prod(shape) > MAX_SAMPLE_ELEMENTS:
            raise ExportError(f"input {spec.name!r}: a sample of shape {list(shape)} exceeds the "
                              f"parity check's {MAX_SAMPLE_ELEMENTS} elements; pass inputs= "
                              "(smaller examples) or check=False")
        np_dtype = dtypes.from_name(spec.dtype).np
        if spec.dtype in ("float16", "bfloat16", "float32", "float64"):
            feeds[spec.name] = rng.standard_normal(shape).astype(np_dtype)
        elif spec.dtype == "bool":
            feeds[spec.name] = rng.random(shape) < 0.5
        else:
            feeds[spec.name] = rng.integers(0, 2, shape).astype(np_dtype)
    return feeds


def check_parity(session, ir: GraphIR, state: dict, specs_in, batches: list, inputs: dict | None = None,
                 rtol: float | None = None) -> list:
    """Compare ``session`` with the interpreter at each batch size; raise ``ExportError``
    naming the first output that diverges. ``rtol`` overrides the per-dtype tolerance."""
    _check_value_sizes(ir, [b for b in batches if b])
    drawn = random_outputs(ir)
    records = []
    for i, batch in enumerate(batches):
        feeds = inputs if inputs is not None else sample_inputs(specs_in, batch, seed=i)
        expected = run_ir(ir, feeds, state)
        got = session.run(None, feeds)
        for v, actual in zip(ir.outputs, got):
            compare = _compare_drawn if v.name in drawn else _compare
            records.append(compare(v.name, v.dtype, expected[v.name], actual, batch, rtol))
        if inputs is not None:
            break
    return records


def random_outputs(ir: GraphIR) -> set:
    """Names of the graph outputs that depend on a random draw."""
    tainted = set()
    for node in ir.nodes:  # topological order
        if node.op in RANDOM_PRIMITIVES or any(name in tainted for name in node.inputs):
            tainted.update(node.outputs)
    return {v.name for v in ir.outputs if v.name in tainted}


def _compare_drawn(name: str, dtype: str, ref: np.ndarray, got: np.ndarray, batch: int,
                   rtol: float | None = None) -> ParityRecord:
    """A random output: same shape and dtype kind, and finite wherever flowserve's draw is."""
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape or ref.dtype.kind != got.dtype.kind:
        raise ExportError(f"parity check failed at batch {batch}: output {name!r} (drawn at random) is "
                          f"{got.dtype}{list(got.shape)} in ONNX Runtime, flowserve computes "
                          f"{ref.dtype}{list(ref.shape)}")
    if ref.dtype.kind in "fc" and np.isfinite(ref).all() and not np.isfinite(got).all():
        raise ExportError(f"parity check failed at batch {batch}: output {name!r} (drawn at random) holds "
                          f"{int(np.sum(~np.isfinite(got)))} non-finite values in ONNX Runtime, none in flowserve")
    return ParityRecord(batch, name, 0.0, 0.0, compared="shape")


def _check_value_sizes(ir: GraphIR, batches: list) -> None:
    """Refuse a graph whose computed values would exceed ``MAX_VALUE_ELEMENTS``."""
    traced = {v.shape[0] for v in ir.inputs if v.shape and v.shape[0] > 0}
    scale = max(batches, default=1) / min(traced) if batches and len(traced) == 1 else 1
    for node in ir.nodes:
        for name in node.outputs:
            elements = math.prod(ir.values[name].shape) * max(1.0, scale)
            if elements > MAX_VALUE_ELEMENTS:
                raise ExportError(f"value {name!r} ({node.op}, shape {list(ir.values[name].shape)}) "
                                  f"would hold about {int(elements)} elements in the parity check, "
                                  f"more than its {MAX_VALUE_ELEMENTS}; pass check=False")


def _compare(name: str, dtype: str, ref: np.ndarray, got: np.ndarray, batch: int,
             rtol: float | None = None) -> ParityRecord:
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape:
        raise ExportError(f"parity check failed at batch {batch}: output {name!r} has shape {got.shape} "
                          f"in ONNX Runtime, flowserve computes {ref.shape}")
    if ref.dtype.kind not in "fc":
        mismatches = int(np.sum(ref != got))
        if mismatches:
            raise ExportError(f"parity check failed at batch {batch}: output {name!r} differs in "
                              f"{mismatches} of {ref.size} elements from flowserve's own execution")
        return ParityRecord(batch, name, 0.0, 0.0)
    rtol = rtol if rtol is not None else TOLERANCES.get(dtype, DEFAULT_RTOL)
    r64, g64 = ref.astype(np.float64), got.astype(np.float64)
    scale = float(np.max(np.abs(r64))) if r64.size else 0.0
    atol = rtol * scale
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite (a CTC loss of an impossible target)
        err = np.abs(g64 - r64)
        bad = err > atol + rtol * np.abs(r64)
    if np.any(bad) or not np.all(np.isfinite(g64) == np.isfinite(r64)):
        worst = np.unravel_index(int(np.argmax(np.where(np.isfinite(err), err, np.inf))), err.shape)
        raise ExportError(
            f"parity check failed at batch {batch}: output {name!r} diverges from flowserve's own "
            f"execution in {int(np.sum(bad))} of {ref.size} elements (worst at {tuple(int(i) for i in worst)}: "
            f"ONNX Runtime {g64[worst]!r}, flowserve {r64[worst]!r}; allowed rtol={rtol}, atol={atol:.3g}). "
            f"Deep float32 networks can differ by rounding alone: a larger tolerance (--rtol 1e-4) "
            f"accepts that; a real lowering fault is usually off by far more")
    return ParityRecord(batch, name, float(err.max()) if err.size else 0.0, atol)
