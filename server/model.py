"""A loaded model version: metadata, request validation, instances and batcher.

``ServedModel`` turns an ``onnx.ModelProto`` into what the data plane needs:
tensor metadata in protocol terms, checks of a request's inputs against it,
ONNX Runtime sessions behind one ``DynamicBatcher`` (``instance_count`` of them, or
under the ``wide-narrow`` CPU policy one on every core plus one per core), and the
statistics that ``/stats`` and ``/metrics`` report::

    model = ServedModel("mlp", "1", proto, resolved_config)
    await model.start()                      # sessions exist already; starts workers
    outputs = await model.infer({"x": x})    # validated, batched, split back
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Callable, Optional

import numpy as np
import onnx

from flowserve.format.onnx_metadata import BATCH_NOTE_KEY, DYNAMIC_DIMS_KEY
from flowserve.protocol.datatypes import DATATYPE_BY_NUMPY, NUMPY_BY_DATATYPE

from .batcher import BatchRecord, DynamicBatcher
from .config import ResolvedModelConfig
from .datatypes import DATATYPE_BY_ONNX
from .errors import InferenceFailedError, InvalidRequestError, ModelLoadError
from .runner import OrtRunner


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output: protocol datatype and shape (-1: any size)."""

    name: str
    datatype: str
    shape: tuple

    @property
    def dtype(self) -> np.dtype:
        return NUMPY_BY_DATATYPE[self.datatype]


def tensor_specs(values, skip: set = frozenset()) -> list[TensorSpec]:
    """``TensorSpec``s of ONNX graph inputs/outputs (initializers in ``skip`` left out)."""
    specs = []
    for value in values:
        if value.name in skip:
            continue
        tensor_type = value.type.tensor_type
        if tensor_type.elem_type not in DATATYPE_BY_ONNX:
            raise ModelLoadError(f"tensor {value.name!r}: element type {tensor_type.elem_type} "
                                 "cannot be served")
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
        specs.append(TensorSpec(value.name, DATATYPE_BY_ONNX[tensor_type.elem_type], dims))
    return specs


@dataclasses.dataclass
class Duration:
    """A count and a total in nanoseconds, as the statistics extension reports them."""

    count: int = 0
    ns: int = 0

    def add(self, seconds: float, count: int = 1) -> None:
        self.count += count
        self.ns += int(seconds * 1e9)

    def merge(self, other: "Duration") -> None:
        self.count += other.count
        self.ns += other.ns


@dataclasses.dataclass
class ComputeStatistics:
    """Executions and the nanoseconds of their three phases (Triton's compute_input,
    compute_infer, compute_output): one count for all three, as perf_analyzer's
    consistency check requires."""

    count: int = 0
    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0

    def add(self, record: BatchRecord) -> None:
        self.count += 1
        self.input_ns += int(record.input_s * 1e9)
        self.infer_ns += int(record.infer_s * 1e9)
        self.output_ns += int(record.output_s * 1e9)

    def merge(self, other: "ComputeStatistics") -> None:
        self.count += other.count
        self.input_ns += other.input_ns
        self.infer_ns += other.infer_ns
        self.output_ns += other.output_ns


@dataclasses.dataclass
class ModelStatistics:
    """Counters of one model version (Triton's statistics extension)."""

    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    success: Duration = dataclasses.field(default_factory=Duration)
    fail: Duration = dataclasses.field(default_factory=Duration)
    queue: Duration = dataclasses.field(default_factory=Duration)
    compute: ComputeStatistics = dataclasses.field(default_factory=ComputeStatistics)
    batches: dict = dataclasses.field(default_factory=dict)  # rows -> ComputeStatistics

    def merge(self, other: "ModelStatistics") -> None:
        """Add ``other`` (another worker's counters of the same version): counts and
        nanoseconds add up, ``last_inference_ms`` is the later one, batches by size."""
        self.inference_count += other.inference_count
        self.execution_count += other.execution_count
        self.last_inference_ms = max(self.last_inference_ms, other.last_inference_ms)
        for name in _DURATIONS:
            getattr(self, name).merge(getattr(other, name))
        self.compute.merge(other.compute)
        for rows, batch in other.batches.items():
            self.batches.setdefault(rows, ComputeStatistics()).merge(batch)

    def snapshot(self) -> dict:
        """The counters as plain JSON values (``from_snapshot`` reads them back)."""
        values = {name: getattr(self, name) for name in _COUNTS}
        for name in (*_DURATIONS, "compute"):
            values[name] = vars(getattr(self, name)).copy()
        values["batches"] = [[rows, vars(batch).copy()]
                             for rows, batch in sorted(self.batches.items())]
        return values

    @classmethod
    def from_snapshot(cls, values, where: str) -> "ModelStatistics":
        """A ``snapshot()`` read back; ``ValueError`` naming the field (under ``where``)
        when ``values`` is not one."""
        _check_keys(values, [f.name for f in dataclasses.fields(cls)], where)
        stats = cls(**{name: _count(values[name], f"{where}.{name}") for name in _COUNTS})
        for name in _DURATIONS:
            setattr(stats, name, _counters(Duration, values[name], f"{where}.{name}"))
        stats.compute = _counters(ComputeStatistics, values["compute"], f"{where}.compute")
        if not isinstance(values["batches"], list):
            raise ValueError(f"{where}.batches: expected a list of [rows, counters], got "
                             f"{type(values['batches']).__name__}")
        for index, row in enumerate(values["batches"]):
            place = f"{where}.batches[{index}]"
            if not isinstance(row, list) or len(row) != 2:
                raise ValueError(f"{place}: expected [rows, counters], got {row!r:.80}")
            rows = _count(row[0], f"{place}[0]")
            if rows in stats.batches:
                raise ValueError(f"{place}: batch size {rows} appears twice")
            stats.batches[rows] = _counters(ComputeStatistics, row[1], f"{place}[1]")
        return stats


_COUNTS = ("inference_count", "execution_count", "last_inference_ms")
_DURATIONS = ("success", "fail", "queue")


def _check_keys(values, names: list, where: str) -> None:
    if not isinstance(values, dict) or sorted(values) != sorted(names):
        raise ValueError(f"{where}: expected an object with keys {sorted(names)}, got "
                         f"{values!r:.120}")


def _count(value, where: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{where}: expected an integer >= 0, got {value!r:.40}")
    return value


def _counters(kind, values, where: str):
    """A ``Duration`` or ``ComputeStatistics`` from its snapshot values (its fields)."""
    names = [f.name for f in dataclasses.fields(kind)]
    _check_keys(values, names, where)
    return kind(**{name: _count(values[name], f"{where}.{name}") for name in names})


class ServedModel:
    """One version of a model, ready to be started on an event loop."""

    platform = "onnxruntime_onnx"

    def __init__(self, name: str, version: str, proto: onnx.ModelProto,
                 config: ResolvedModelConfig, on_batch: Callable = None):
        self.name, self.version, self.config = name, version, config
        initializers = {t.name for t in proto.graph.initializer}
        self.inputs = tensor_specs(proto.graph.input, initializers)
        self.outputs = tensor_specs(proto.graph.output)
        # why the batch size is fixed (op and source line), when the exporter recorded it
        metadata = {p.key: p.value for p in proto.metadata_props}
        self.batch_note = metadata.get(BATCH_NOTE_KEY)
        # named dims shared between inputs (flow.save(..., dynamic_dims=...)): input -> {axis: name}
        self.named_dims = _named_dims(metadata.get(DYNAMIC_DIMS_KEY), {s.name for s in self.inputs})
        self.max_batch_size = config.max_batch_size if self._batchable() else 0
        self.stats = ModelStatistics()
        self.parameters: dict = {}  # shown in model metadata: verification result and figures
        self._stats_lock = threading.Lock()
        self._on_batch_metrics = on_batch or (lambda model, record: None)
        self.runners, self.cpu_policy = self._make_runners(proto, config)
        self.device = self.runners[0].device
        self._input_by_name = {spec.name: spec for spec in self.inputs}
        self._output_names = [spec.name for spec in self.outputs]
        self.output_datatypes = {spec.name: spec.datatype for spec in self.outputs}
        self.batcher = DynamicBatcher(
            [runner.run for runner in self.runners],
            max_batch_size=self.max_batch_size or 1,
            max_queue_delay_s=config.max_queue_delay_us / 1e6 if self.max_batch_size else 0.0,
            preferred_batch_sizes=tuple(config.preferred_batch_size),
            max_queue_size=config.max_queue_size,
            on_batch=self._record_batch,
            wide_narrow=self.cpu_policy == "wide-narrow",
        )

    def _make_runners(self, proto: onnx.ModelProto, config: ResolvedModelConfig) -> tuple[list, str]:
        """The sessions and the CPU policy they follow. ``fixed``: one session per instance,
        with ``config.intra_op_threads`` threads; when that is 0 (auto) and a CPU session got
        several, a model whose run at its largest batch takes under ``SINGLE_THREAD_BELOW_S``
        gets one: waking a second thread that does not spin costs more than it saves there
        (measured: MLP 64-256-10 at batch 64 runs in 27 µs on one thread, 57 µs on two).
        ``wide-narrow`` (under ``auto``, a CPU ONNX Runtime model whose batch-1 run takes
        ``WIDE_NARROW_FROM_S`` or more): one session on every core, then the narrow sessions
        of ``narrow_sessions`` (``DynamicBatcher``). Shorter runs keep the fixed layout: with
        one session the batcher runs a small batch on the event loop, without the thread hop
        that would cost such a run more than the narrow sessions gain."""
        def make(instances: int, threads: int) -> OrtRunner:
            return OrtRunner(proto, config.device, instances, threads, provider=config.provider,
                             cudnn_benchmark=config.cudnn_benchmark, max_batch_size=self.max_batch_size)

        policy, instances, threads = config.cpu_policy, config.instance_count, config.intra_op_threads
        if policy == "wide-narrow":  # the other level's instances and threads do not apply
            instances, threads = 1, 0
        first = make(instances, threads)
        cores_shared = (not threads and first.engine.name == "cpu" and first.intra_op_threads > 1)
        wide = cores_shared and policy == "wide-narrow"
        if cores_shared and policy != "wide-narrow":
            alone_s = _fastest_run_s(first, self.inputs, 1 if self.max_batch_size else None)  # one request
            if alone_s < SINGLE_THREAD_BELOW_S and self._largest_batch_runs_short(first):
                return [make(instances, 1) for _ in range(instances)], "fixed"
            wide = policy == "auto" and alone_s >= WIDE_NARROW_FROM_S
        if wide:
            narrow, threads = narrow_sessions(first.intra_op_threads)
            return [first] + [make(1, threads) for _ in range(narrow)], "wide-narrow"
        return [first] + [make(instances, threads) for _ in range(instances - 1)], "fixed"

    def _largest_batch_runs_short(self, runner: OrtRunner) -> bool:
        """Whether ``runner``'s run at the largest batch takes under ``SINGLE_THREAD_BELOW_S``
        (timed only once batch 1 was short; true for a model without batching)."""
        return not self.max_batch_size or \
            _fastest_run_s(runner, self.inputs, self.max_batch_size) < SINGLE_THREAD_BELOW_S

    @property
    def sessions(self) -> dict:
        """The CPU policy and each session's threads, as model metadata shows them."""
        return {"policy": self.cpu_policy, "threads": [r.intra_op_threads for r in self.runners]}

    def _batchable(self) -> bool:
        """Dim 0 of every input and output is free, and is no named dim (the node count of a
        graph's ``x`` and ``adj`` cannot be merged across requests)."""
        specs = self.inputs + self.outputs
        named_first = any(0 in axes for axes in self.named_dims.values())
        return bool(self.inputs) and not named_first and all(s.shape and s.shape[0] == -1 for s in specs)

    def warmup(self) -> None:
        """Run every instance once per warmup batch size (zero inputs)."""
        for rows in self.config.warmup_batch_sizes:
            rows = min(rows, self.max_batch_size) if self.max_batch_size else None
            inputs = {spec.name: _zeros(spec, rows) for spec in self.inputs}
            for runner in self.runners:
                runner.run(inputs)

    def warm_batch_buckets(self) -> None:
        """On CUDA, run every instance once at each batch size it pads batches up to, so no
        request waits for cuDNN to plan a new shape (nothing to do on the CPU)."""
        for runner in self.runners:
            for rows in runner.batch_buckets:
                runner.run({spec.name: _zeros(spec, rows) for spec in self.inputs})

    async def start(self) -> None:
        """Start the batcher's workers on the running event loop."""
        await self.batcher.start()

    async def stop(self) -> None:
        """Finish queued requests and stop the workers."""
        await self.batcher.stop()

    def check_inputs(self, inputs: dict) -> int:
        """Validate ``inputs`` against the model; returns the request's batch rows."""
        rows = None
        for name, array in inputs.items():
            spec = self._input_by_name.get(name)
            if spec is None:
                raise InvalidRequestError(f"inputs: unknown input {name!r}; model "
                                          f"{self.name!r} expects {list(self._input_by_name)}")
            _check_tensor(spec, array, self.batch_note)
            if self.max_batch_size:
                rows = _check_rows(name, array, rows, self.max_batch_size)
        _check_named_dims(self.named_dims, inputs)
        missing = [name for name in self._input_by_name if name not in inputs]
        if missing:
            raise InvalidRequestError(f"inputs: missing input(s) {missing}; model "
                                      f"{self.name!r} expects {list(self._input_by_name)}")
        return rows or 1

    def check_outputs(self, names: Optional[list[str]]) -> list[str]:
        """The output names to return: ``names`` (checked) or all outputs."""
        if not names:
            return self._output_names
        unknown = [n for n in names if n not in self._output_names]
        if unknown:
            raise InvalidRequestError(f"outputs: unknown output(s) {unknown}; model "
                                      f"{self.name!r} has {self._output_names}")
        return list(names)

    async def infer(self, inputs: dict, timeout_s: Optional[float] = None) -> dict:
        """Validated, batched inference of one request; records success/failure."""
        started = time.monotonic()
        try:
            rows = self.check_inputs(inputs)
            if timeout_s is None and self.config.default_timeout_us:
                timeout_s = self.config.default_timeout_us / 1e6
            outputs = await self.batcher.submit(inputs, rows, timeout_s)
        except Exception:
            with self._stats_lock:
                self.stats.fail.add(time.monotonic() - started)
            raise
        with self._stats_lock:
            self.stats.success.add(time.monotonic() - started)
        return outputs

    def statistics(self) -> ModelStatistics:
        """A copy of this version's counters, consistent (taken between two batches)."""
        copy = ModelStatistics()
        with self._stats_lock:
            copy.merge(self.stats)
        return copy

    def _record_batch(self, record: BatchRecord) -> None:
        with self._stats_lock:
            stats = self.stats
            if not record.failed:
                stats.inference_count += record.rows
                stats.execution_count += 1
                stats.last_inference_ms = int(time.time() * 1000)
                stats.compute.add(record)
                batch = stats.batches.get(record.rows)
                if batch is None:
                    batch = stats.batches[record.rows] = ComputeStatistics()
                batch.add(record)
            for waited in record.queue_s:
                stats.queue.add(waited)
        self._on_batch_metrics(self, record)


SINGLE_THREAD_BELOW_S = 0.0002
WIDE_NARROW_FROM_S = 0.001  # auto's wide-narrow: MobileNetV2-224 (~10 ms) yes, an MLP (~0.1 ms) no
NARROW_SESSIONS_AT_MOST = 8  # wide-narrow's weight copies stay at most 9 on a many-core machine


def narrow_sessions(cores: int) -> tuple[int, int]:
    """``(sessions, threads each)`` of wide-narrow's narrow sessions on ``cores`` cores: one
    single-threaded session per core up to ``NARROW_SESSIONS_AT_MOST`` cores, beyond that as
    many sessions of equal threads as fit (64 cores: 8 x 8; 12: 6 x 2)."""
    threads = -(-cores // NARROW_SESSIONS_AT_MOST)
    return cores // threads, threads


def _fastest_run_s(runner: OrtRunner, specs: list, rows: Optional[int], runs: int = 4) -> float:
    """The shortest of ``runs`` runs of ``runner`` on zeros of ``rows`` rows, after one
    warm-up run; infinite when the model cannot run on zeros."""
    inputs = {spec.name: _zeros(spec, rows) for spec in specs}
    best = float("inf")
    try:
        runner.run(inputs)
        for _ in range(runs):
            started = time.perf_counter()
            runner.run(inputs)
            best = min(best, time.perf_counter() - started)
    except InferenceFailedError:
        return float("inf")
    return best


def _zeros(spec: TensorSpec, rows: Optional[int]) -> np.ndarray:
    shape = [max(d, 1) for d in spec.shape]
    if rows is not None and shape:
        shape[0] = rows
    if spec.datatype == "BYTES":
        array = np.empty(shape, dtype=object)
        array.fill(b"")
        return array
    return np.zeros(shape, dtype=spec.dtype)


def _check_tensor(spec: TensorSpec, array: np.ndarray, batch_note: Optional[str] = None) -> None:
    if array.dtype != spec.dtype:
        given = DATATYPE_BY_NUMPY.get(array.dtype, str(array.dtype))
        raise InvalidRequestError(
            f"input {spec.name!r}: datatype {given} given, model expects {spec.datatype}"
        )
    fits = len(array.shape) == len(spec.shape) and all(
        want in (-1, got) for want, got in zip(spec.shape, array.shape)
    )
    if not fits:
        why = f"; {batch_note}" if batch_note and array.shape[:1] != tuple(spec.shape[:1]) else ""
        raise InvalidRequestError(
            f"input {spec.name!r}: shape {list(array.shape)} given, model expects "
            f"{list(spec.shape)} (-1: any size){why}"
        )


def _named_dims(text: Optional[str], inputs: set) -> dict:
    """The exporter's ``flowserve.dynamic_dims`` metadata: input name -> {axis: dim name}."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
        return {t: {int(a): str(n) for a, n in axes.items()} for t, axes in raw.items() if t in inputs}
    except (ValueError, TypeError, AttributeError) as exc:
        raise ModelLoadError(f"metadata {DYNAMIC_DIMS_KEY!r} is not a valid dims map ({exc})") from None


def _check_named_dims(named: dict, inputs: dict) -> None:
    """Every named dim has one size across the request's inputs."""
    seen: dict = {}
    for tensor, axes in named.items():
        array = inputs.get(tensor)
        for axis, name in axes.items():
            if array is None or axis >= array.ndim:
                continue
            size = int(array.shape[axis])
            if name in seen and seen[name][2] != size:
                other, other_axis, other_size = seen[name]
                raise InvalidRequestError(
                    f"inputs {other!r} and {tensor!r}: dim {name!r} is {other_size} in {other!r} (dim {other_axis}) "
                    f"but {size} in {tensor!r} (dim {axis}); they must be equal"
                )
            seen.setdefault(name, (tensor, axis, size))


def _check_rows(name: str, array: np.ndarray, rows: Optional[int], max_batch: int) -> int:
    if rows is not None and array.shape[0] != rows:
        raise InvalidRequestError(
            f"input {name!r}: batch size {array.shape[0]} differs from other inputs' {rows}"
        )
    if array.shape[0] > max_batch:
        raise InvalidRequestError(
            f"input {name!r}: batch size {array.shape[0]} exceeds max_batch_size {max_batch}"
        )
    if array.shape[0] == 0:
        raise InvalidRequestError(f"input {name!r}: batch size must be at least 1")
    return array.shape[0]
