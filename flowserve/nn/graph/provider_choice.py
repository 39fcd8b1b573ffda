"""The engine that runs a compiled graph, chosen by measurement
(``config.set_execution_provider("auto")``, the default).

The candidates are ONNX Runtime (its CUDA provider where a GPU is usable, else its CPU
provider) and OpenVINO where it is installed. With one candidate nothing is measured. With
more, the graph's second call (the first one traces and compiles on ONNX Runtime) runs
each candidate on that call's inputs and state, a few times, inside a budget of
``BUDGET_S`` seconds for all of them together (compiling included), and keeps the fastest.
A candidate is dropped, with one log line, when it fails to compile or run, when its
outputs (the loss) differ from ONNX Runtime's beyond float32 rounding (``RTOL``), or when
its first run is ``SLOWER`` times ONNX Runtime's step or more (the run is cut off there).
A graph that draws random numbers (dropout) cannot give the same outputs on two engines
(each has its own generator): there only shapes and finiteness are checked.

The choice is written as JSON under the cache directory (``FLOWSERVE_CACHE_DIR``, else
``~/.cache/flowserve``), keyed by the SHA-256 of the graph's ONNX model (ONNX Runtime's
lowering, the graph's name left out), this machine (CPU
model and flags, core count, threads) and the engines' versions, so that the next process
with the same graph on the same machine takes it without measuring again.

>>> from flowserve.nn.graph.provider_choice import EngineChoice
>>> EngineChoice("cpu", {"cpu": 4.0, "openvino": 2.5}, {}, 1.2).describe()
'cpu (measured ms per step: cpu 4.0, openvino 2.5; 1.2 s measuring)'
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flowserve.errors import GraphError
from flowserve.onnx_backend import openvino, providers, runtime
from flowserve.utils.cpus import usable_cpus

LOG = logging.getLogger("flowserve.graph")
BUDGET_S = 10.0  # all candidates' compiling and timed runs together
STEPS = 3  # timed runs per candidate, fewer where the budget runs out
SLOWER = 3.0  # a candidate this many times slower than ONNX Runtime is dropped (warned when chosen)
FIRST_RUN_GRACE_S = 1.0  # an engine's first run also allocates and JIT-compiles kernels
RTOL, ATOL = 1e-4, 1e-6  # outputs agree to float32 rounding of differently ordered sums
CACHE_FORMAT = 1


@dataclass
class EngineChoice:
    """The engine a graph runs on and why: each candidate's fastest step in ms, the
    dropped ones with their reason, the seconds spent measuring, whether it came from the
    cache."""

    engine: str
    step_ms: dict
    dropped: dict
    measure_s: float
    cached: bool = False
    compared: bool = True

    def describe(self) -> str:
        times = ", ".join(f"{k} {v:.1f}" for k, v in self.step_ms.items())
        drops = "".join(f"; {k} dropped: {why}" for k, why in self.dropped.items())
        unchecked = "" if self.compared else "; outputs not compared: the graph draws random numbers"
        origin = "cached" if self.cached else f"{self.measure_s:.1f} s measuring"
        return f"{self.engine} (measured ms per step: {times}{drops}{unchecked}; {origin})"

    def to_json(self) -> dict:
        return {"format": CACHE_FORMAT, "engine": self.engine, "step_ms": self.step_ms,
                "dropped": self.dropped, "measure_s": self.measure_s, "compared": self.compared}

    @classmethod
    def from_json(cls, data: dict) -> "EngineChoice":
        if data.get("format") != CACHE_FORMAT or not isinstance(data.get("engine"), str):
            raise ValueError(f"expected an engine choice of format {CACHE_FORMAT}, got {sorted(data)}")
        return cls(data["engine"], dict(data.get("step_ms", {})), dict(data.get("dropped", {})),
                   float(data.get("measure_s", 0.0)), cached=True, compared=bool(data.get("compared", True)))


def candidates(ort_name: str) -> list:
    """The engines "auto" compares: ONNX Runtime first (the reference), then the provider
    table's entries that "auto" measures, run on the same device and are installed (OpenVINO
    on the CPU; not imported here: a candidate failing to load is dropped when measured)."""
    device = providers.PROVIDERS[ort_name].device
    return [ort_name] + [p.name for p in providers.PROVIDERS.values()
                         if p.measured_by_auto and device in p.devices and p.installed()]


# -- the cache -----------------------------------------------------------------------------


def cache_dir() -> Path:
    return providers.cache_root() / "engines"


def machine_key(threads: int) -> dict:
    """What a measurement depends on besides the graph: the CPU, the threads, the engines."""
    cpu = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "flags") and key not in cpu:
                    cpu[key] = value.strip()
    except OSError:  # not Linux: the platform's processor string stands for the CPU
        cpu["model name"] = platform.processor()
    return {"machine": platform.machine(), "cpu": cpu.get("model name", ""),
            "flags": hashlib.sha256(cpu.get("flags", "").encode()).hexdigest()[:16],
            "cores": usable_cpus(), "threads": threads, **runtime.engine_versions()}


def cache_path(model) -> Path:
    """The cache file of ONNX ``model``'s choice on this machine (the graph's name, which
    numbers graphs in a process, left out)."""
    name, model.graph.name = model.graph.name, ""
    try:
        digest = hashlib.sha256(model.SerializeToString())
    finally:
        model.graph.name = name
    digest.update(json.dumps(machine_key(usable_cpus()), sort_keys=True).encode())
    return cache_dir() / f"{digest.hexdigest()}.json"


def load_cached(path: Path, engines: list) -> EngineChoice | None:
    """The cached choice at ``path`` if there is one naming one of ``engines``; a damaged
    file is ignored (and measured again)."""
    try:
        choice = EngineChoice.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return choice if choice.engine in engines else None


def save_cached(path: Path, choice: EngineChoice) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(choice.to_json(), indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError as exc:  # a read-only home: measure again next time
        LOG.info("nn.Graph engine choice not cached at %s: %s", path, exc)


# -- measuring -----------------------------------------------------------------------------


RANDOM_OPS = frozenset({"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli",
                        "Multinomial"})


def draws_random(model) -> bool:
    """Whether ONNX ``model`` draws random numbers (dropout): each engine has its own
    generator, so its outputs cannot match another engine's."""
    return any(node.op_type in RANDOM_OPS for node in model.graph.node)


def _agree(got: list, want: list, compare: bool = True) -> str | None:
    """Why the outputs of a candidate disagree with the reference's, or None; without
    ``compare`` (a graph drawing random numbers) only shapes and finiteness are checked."""
    for i, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return f"output {i} has shape {a.shape}, ONNX Runtime's {b.shape}"
        if not compare:
            if a.dtype.kind == "f" and np.isfinite(b).all() and not np.isfinite(a).all():
                return f"output {i} is not finite where ONNX Runtime's is"
            continue
        if a.dtype.kind == "f" and not np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True):
            worst = float(np.max(np.abs(a.astype(np.float64) - b)))
            return f"output {i} differs from ONNX Runtime's by {worst:.3g} (beyond float32 rounding)"
        if a.dtype.kind != "f" and not np.array_equal(a, b):
            return f"output {i} differs from ONNX Runtime's"
    return None


def _build_within(build, seconds: float):
    """``build()``'s session, or None where it takes longer than ``seconds`` (it is left
    to finish on a background thread, joined at exit: compilers cannot be interrupted)."""
    done, result = threading.Event(), {}

    def run():
        try:
            result["session"] = build()
        except Exception as exc:  # re-raised in the measuring thread
            result["error"] = exc
        done.set()

    openvino.background(run)
    if not done.wait(max(seconds, 0.0)):
        return None
    if "error" in result:
        raise result["error"]
    return result["session"]


def _time_runs(session, names: list, feeds: dict, first_limit: float, deadline: float) -> tuple[list, list | None]:
    """(seconds of each run, the first run's outputs): the first run cut off at
    ``first_limit`` seconds (outputs None), more runs while the deadline allows."""
    times, first = [], None
    while len(times) < STEPS:
        start = time.perf_counter()
        outs = runtime.run_within(session, names, feeds, first_limit) if not times else session.run(names, feeds)
        times.append(time.perf_counter() - start)
        if outs is None:
            return times, None
        first = outs if first is None else first
        if time.perf_counter() + min(times) > deadline:
            break
    return times, first


def measure(builders: dict, feeds: dict, names: list, graph_name: str, quiet: bool = False,
            compare: bool = True) -> EngineChoice:
    """Time each engine of ``builders`` (name -> function returning its session; the first
    is ONNX Runtime, the reference) on ``feeds``, comparing outputs ``names`` (the graph's
    own outputs: the loss) unless ``compare`` is False (a graph drawing random numbers).
    ``quiet``: no log lines (the caller reports)."""
    start = time.perf_counter()
    deadline = start + BUDGET_S
    step_ms, dropped = {}, {}
    reference, ref_step = None, None
    for name, build in builders.items():
        try:
            why, times, outs = _try(build, names, feeds, ref_step, deadline)
            if why is None and reference is not None:
                why = _agree(outs, reference, compare)
        except Exception as exc:
            text = str(exc).strip()
            why = f"failed: {type(exc).__name__}: {text.splitlines()[0] if text else ''}"
        if why is None and ref_step is not None and min(times) >= SLOWER * ref_step:
            why = f"{min(times) * 1e3:.1f} ms per step, {min(times) / ref_step:.1f}x ONNX Runtime's"
        if why is not None:
            dropped[name] = why
            if not quiet:
                LOG.warning("nn.Graph %s: engine %s dropped from the measurement: %s", graph_name, name, why)
            continue
        if reference is None:
            reference, ref_step = outs, min(times)
        step_ms[name] = round(min(times) * 1e3, 3)
    if not step_ms:
        raise GraphError(f"nn.Graph {graph_name}: no engine ran the graph ({dropped})")
    engine = min(step_ms, key=step_ms.get)
    choice = EngineChoice(engine, step_ms, dropped, round(time.perf_counter() - start, 3), compared=compare)
    if not quiet:
        LOG.info("nn.Graph %s runs on %s", graph_name, choice.describe())
    return choice


def _try(build, names: list, feeds: dict, ref_step: float | None, deadline: float) -> tuple:
    """(why the engine is dropped or None, its run times, its first outputs): the
    reference (``ref_step`` None) is built and run within the budget; another engine must
    compile before the deadline and finish its first run within ``SLOWER`` times the
    reference's step (plus its first-run set-up)."""
    if ref_step is None:
        session, limit = build(), deadline - time.perf_counter()
    else:
        session = _build_within(build, deadline - time.perf_counter())
        if session is None:
            return f"not compiled within the {BUDGET_S:g} s measuring budget", [], None
        limit = SLOWER * ref_step + FIRST_RUN_GRACE_S
    times, outs = _time_runs(session, names, feeds, max(limit, 0.0), deadline)
    if outs is None:
        return f"first step cut off at {limit:.1f} s ({SLOWER:g}x ONNX Runtime's step + {FIRST_RUN_GRACE_S:g} s)", \
            times, None
    return None, times, outs


