"""What runs a traced graph: one small interface (``Executor``) and the kinds that
implement it, chosen from the traced IR by ``choose_executor``:

- ``pipeline``: a rank's stage of a graph with pipeline stages
  (``flowserve.distributed.pipeline.PipelineGraph``: sessions between send/recv);
- ``segmented``: a step of a distributed run whose IR holds collectives
  (``flowserve.distributed.segments.SegmentedGraph``: sessions between collectives);
- ``single``: everything else, one ONNX Runtime session in this process
  (``flowserve.nn.graph.compiled.CompiledGraph``).

Each takes the trace and an ``ExecutorSpec`` and keeps the graph's state in one place:
after a call, the eager tensors in ``executor.state`` hold the new values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

from flowserve.distributed.pipeline import PipelineGraph
from flowserve.distributed.segments import SegmentedGraph, has_collectives
from flowserve.distributed.stages import ATTR as PIPELINE_ATTR
from flowserve.nn.graph.compiled import CompiledGraph
from flowserve.nn.graph.trace import Traced


@runtime_checkable
class Executor(Protocol):
    """A compiled signature of a graph. ``traced``: what it runs; ``key``: the input
    signature it was made for; ``batch``/``dynamic_batch``: the traced batch size and
    whether other batch sizes run on it; ``peak_memory``: measured by debug mode;
    ``modes``: the modules' modes it was traced in, set by ``nn.Graph`` (``modes.py``)."""

    traced: Traced
    key: object
    batch: int | None
    dynamic_batch: bool
    peak_memory: object
    modes: tuple

    def run(self, inputs: list) -> list:
        """Outputs for the flat tensor inputs; the new state written into ``state``."""

    @property
    def state(self) -> dict:
        """State name -> the eager tensor (parameters, buffers, optimizer state) it reads and updates."""

    def describe(self) -> str:
        """One line: the kind of executor and what it runs."""


@dataclass(frozen=True)
class ExecutorSpec:
    """How to run a trace: training or inference, the config options, the input
    signature, the batch size that stays dynamic (None: static), named dynamic dims and
    the device of the inputs (where a graph without state runs)."""

    training: bool
    options: dict = field(default_factory=dict)
    key: object = None
    batch: int | None = None
    dynamic_dims: dict = field(default_factory=dict)
    device: str = "cpu"


@dataclass(frozen=True)
class ExecutorKind:
    name: str
    applies: Callable[[Traced], bool]
    make: Callable[[Traced, ExecutorSpec], Executor]


def _single(traced: Traced, spec: ExecutorSpec) -> Executor:
    return CompiledGraph(traced, spec.training, spec.options, dynamic_batch=spec.batch is not None, key=spec.key,
                         batch=spec.batch, dynamic_dims=spec.dynamic_dims, device=spec.device)


def _segmented(traced: Traced, spec: ExecutorSpec) -> Executor:
    return SegmentedGraph(traced, spec.training, spec.options, key=spec.key)


def _pipeline(traced: Traced, spec: ExecutorSpec) -> Executor:
    return PipelineGraph(traced, spec.training, spec.options, key=spec.key)


EXECUTOR_KINDS = (  # first that applies wins
    ExecutorKind("pipeline", lambda traced: PIPELINE_ATTR in traced.ir.attrs, _pipeline),
    ExecutorKind("segmented", lambda traced: has_collectives(traced.ir), _segmented),
    ExecutorKind("single", lambda traced: True, _single),
)


def choose_executor(traced: Traced) -> ExecutorKind:
    """The kind of executor for ``traced``: the first of ``EXECUTOR_KINDS`` that applies."""
    return next(kind for kind in EXECUTOR_KINDS if kind.applies(traced))


def make_executor(traced: Traced, spec: ExecutorSpec) -> Executor:
    return choose_executor(traced).make(traced, spec)
